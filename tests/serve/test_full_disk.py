"""A queue database that cannot be written (a full disk) strands nothing: the attempt that
cannot be recorded ends as an infrastructure error, its slot is free, /healthz says the store
fails, and once writes work again the store catches up with what happened meanwhile."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.core.model import Job
from runner.stores.queue.sqlite import SqliteQueue
from tests.fakes.passing_backend import PassingBackend
from tests.serve.harness import FINAL, thread_server, wait_until


class FullDiskStore(SqliteQueue):
    """Every write fails as SQLite fails on a full disk while `full` is set; reads work."""

    full = False

    @contextmanager
    def _tx(self, doing: str) -> Iterator[sqlite3.Connection]:
        with super()._tx(doing) as db:
            if self.full:
                with self._guard(doing):
                    raise sqlite3.OperationalError("database or disk is full")
            yield db


class GatedBackend(PassingBackend):
    """Attempts of job `hold` pass once `gate` is set; every other attempt passes at once."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.running = threading.Event()

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        if cancel.is_set():
            raise_cancelled()
        return Place("box", usd_per_hour=1.0)

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        if request.job.id.endswith("hold"):
            self.running.set()
            self.gate.wait(30)
        return RunOutcome(0, None)


def raise_cancelled() -> None:
    from runner.errors import InfrastructureError

    raise InfrastructureError("cancelled before it started")


@pytest.mark.slow
def test_a_full_disk_strands_no_job_and_no_slot(tmp_path: Path) -> None:
    backend = GatedBackend()
    with thread_server(tmp_path, capacity=1, backend=backend, store_type=FullDiskStore) as srv:
        store = srv.service.store
        assert isinstance(store, FullDiskStore)
        (hold,) = srv.api.submit("jobs:\n  hold:\n    run: x\n")
        (later,) = srv.api.submit("jobs:\n  later:\n    run: x\n")
        assert backend.running.wait(10)
        store.full = True
        backend.gate.set()  # hold ends, later starts: neither can be written down

        core = srv.service.driver.core
        wait_until(lambda: core.idle, what="every job settled in the scheduler")
        assert srv.service.servers_held == 0
        health = srv.api.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "degraded"
        assert "database or disk is full" in health.json()["store"]

        store.full = False
        (after,) = srv.api.submit("jobs:\n  after:\n    run: x\n")
        assert srv.api.wait_status(after, FINAL)["status"] == "passed"
        assert srv.api.status(hold) == "passed"  # what was not written is written now
        later_job = srv.api.job(later)
        assert later_job["status"] == "error"
        assert "queue database" in later_job["attempt_list"][0]["message"]
        assert srv.api.get("/healthz").json() == {"status": "ok"}


@pytest.mark.slow
def test_once_the_disk_has_room_the_kept_writes_land_without_new_work(tmp_path: Path) -> None:
    """Issue 25: after a full disk cleared, the queue stayed degraded with a stale "running"
    job until a new submission came. The kept writes are tried again on a timer now."""
    backend = GatedBackend()
    with thread_server(
        tmp_path, capacity=1, backend=backend, store_type=FullDiskStore, journal_retry_s=0.05
    ) as srv:
        store = srv.service.store
        assert isinstance(store, FullDiskStore)
        (hold,) = srv.api.submit("jobs:\n  hold:\n    run: x\n")
        assert backend.running.wait(10)
        store.full = True
        backend.gate.set()
        wait_until(lambda: srv.service.store_failure is not None, what="the refused write")
        assert srv.api.status(hold) == "running"  # what the store still says
        store.full = False  # room again; nothing new is submitted
        wait_until(lambda: srv.api.status(hold) == "passed", 5, "the kept writes to land")
        assert srv.api.get("/healthz").json() == {"status": "ok"}
