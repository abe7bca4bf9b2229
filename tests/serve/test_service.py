"""Server-wide rules over HTTP: the daily spend limit, servers held, a followed log."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import pytest
import requests

from runner.backends.base import (
    NO_STAGES,
    AttemptBill,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    StageSink,
)
from runner.core.model import FailureKind
from runner.serve import app
from runner.serve.service import Service
from tests.fakes.fake_clock import FakeClock
from tests.fakes.passing_backend import PassingBackend
from tests.serve.harness import FINAL, ThreadServer, thread_server, wait_until


class BilledBackend(PassingBackend):
    """Every attempt passes at once and costs $2.50."""

    name = "billed"
    where = "rented-1"
    usd_per_hour = 1.0
    outcome = RunOutcome(0, None)

    def attempt_done(self, place: Place) -> AttemptBill:
        return AttemptBill(2.5)  # as a renting backend bills an attempt's share


@pytest.mark.slow
def test_the_daily_spend_limit_holds_starts_until_the_next_utc_day(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)  # 2027-01-15T08:00:00Z
    with thread_server(
        tmp_path, capacity=1, clock=clock, backend=BilledBackend(), daily_spend_limit=4.0
    ) as srv:
        ids = srv.api.submit(
            "jobs:\n  a:\n    run: x\n  b:\n    needs: a\n    run: x\n"
            "  c:\n    needs: b\n    run: x\n"
        )
        srv.api.wait_status("s1.b", FINAL)
        stats = srv.api.get("/stats").json()
        assert (stats["spend_usd_today"], stats["daily_spend_limit_usd"]) == (5.0, 4.0)
        assert stats["held_until"] == "2027-01-16T00:00:00.000+00:00"
        assert srv.api.job("s1.c")["waiting_for"] == (
            "the daily spend limit (until 2027-01-16T00:00:00Z)"
        )
        clock.unix = 1_800_057_600.0
        srv.service.wake()
        assert srv.api.wait_status("s1.c", FINAL)["status"] == "passed"
        assert [srv.api.job(i)["cost_usd"] for i in ids] == [2.5, 2.5, 2.5]
        assert "clore_run_spend_usd_total 7.500000" in srv.api.get("/metrics").text


@pytest.mark.slow
def test_a_followed_log_streams_until_the_job_settles(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path) as srv:
        srv.api.submit(
            f"jobs:\n  talk:\n    run: |\n      echo one\n"
            f"      while [ ! -e {gate} ]; do sleep 0.02; done\n      echo two\n"
        )
        srv.api.wait_status("s1.talk", {"running"})
        # `running` is recorded as the attempt is handed to a worker, which then places it.
        wait_until(lambda: srv.api.get("/stats").json()["servers_held"] == 1, what="a place")
        url = f"{srv.api.url}/jobs/s1.talk/log?follow=true"
        with requests.get(url, headers=srv.api.session.headers, stream=True, timeout=30) as r:
            seen = b""
            chunks = r.iter_content(chunk_size=None)
            while b"one\n" not in seen:
                seen += next(chunks)
            assert b"two" not in seen
            gate.touch()
            seen += b"".join(chunks)  # ends by itself once the job has settled
        assert b"two\n" in seen and b"attempt 1 passed" in seen
        assert srv.api.status("s1.talk") == "passed"
        assert srv.api.get("/stats").json()["servers_held"] == 0


def test_a_not_before_centuries_away_does_not_stop_the_loop(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        (far,) = srv.api.submit(
            "jobs:\n  far:\n    not-before: 9999-01-01T00:00:00Z\n    run: echo late\n"
        )
        (now,) = srv.api.submit("jobs:\n  now:\n    run: echo now\n")
        assert srv.api.wait_status(now, FINAL)["status"] == "passed"
        assert srv.api.job(far)["waiting_for"] == "not before 9999-01-01T00:00:00Z"
        assert srv.api.get("/healthz").json() == {"status": "ok"}


@pytest.mark.slow
def test_an_attempt_whose_log_cannot_be_opened_ends_and_frees_its_slot(tmp_path: Path) -> None:
    # A folder where the log file should go: opening `<id>.log` fails.
    (tmp_path / "data" / "logs" / "s1.broken.log").mkdir(parents=True)
    with thread_server(tmp_path, capacity=1) as srv:
        (long,) = srv.api.submit("jobs:\n  broken:\n    run: echo x\n")
        (after,) = srv.api.submit("jobs:\n  after:\n    run: echo after\n")
        job = srv.api.wait_status(long, FINAL)
        assert job["status"] == "error"
        assert all(a["finished_at"] is not None for a in job["attempt_list"])
        assert srv.api.wait_status(after, FINAL)["status"] == "passed"


@pytest.mark.slow
def test_the_daily_spend_limit_still_holds_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)  # 2027-01-15T08:00:00Z

    def server() -> AbstractContextManager[ThreadServer]:
        return thread_server(
            tmp_path, capacity=1, clock=clock, backend=BilledBackend(), daily_spend_limit=4.0
        )

    with server() as srv:
        srv.api.submit(
            "jobs:\n  a:\n    run: x\n  b:\n    needs: a\n    run: x\n"
            "  c:\n    needs: b\n    run: x\n"
        )
        srv.api.wait_status("s1.b", FINAL)
        assert srv.api.status("s1.c") == "queued"
    with server() as srv:
        job = srv.api.job("s1.c")  # a start would have been recorded as the server started
        assert (job["status"], job["attempts"]) == ("queued", 0)
        assert job["waiting_for"] == "the daily spend limit (until 2027-01-16T00:00:00Z)"
        clock.unix = 1_800_057_600.0
        srv.service.wake()
        assert srv.api.wait_status("s1.c", FINAL)["status"] == "passed"


@pytest.mark.slow
def test_followers_of_a_waiting_job_do_not_starve_the_api(tmp_path: Path) -> None:
    # A followed log of a job that has not started holds no worker thread while it waits:
    # the API's thread pool (40) must still answer with more followers than that.
    with thread_server(tmp_path, clock=FakeClock()) as srv:
        (night,) = srv.api.submit(
            "jobs:\n  night:\n    not-before: 2030-01-01T00:00:00Z\n    run: echo late\n"
        )
        url = f"{srv.api.url}/jobs/{night}/log?follow=true"
        headers = srv.api.session.headers
        with ExitStack() as streams:
            for _ in range(45):
                streams.enter_context(requests.get(url, headers=headers, stream=True, timeout=30))
            reply = requests.get(f"{srv.api.url}/stats", headers=headers, timeout=5)
            assert reply.status_code == 200 and reply.json()["counts"]["queued"] == 1


@pytest.mark.slow
def test_a_followed_job_that_waits_says_why_at_once_and_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No byte for as long as the job waited left a client (or a proxy) with a dead-looking
    stream: a line says why, at once and every WAITING_NOTE_S, until the log begins."""
    monkeypatch.setattr(app, "WAITING_NOTE_S", 0.3)
    with thread_server(tmp_path, clock=FakeClock()) as srv:
        (night,) = srv.api.submit(
            "jobs:\n  night:\n    not-before: 2030-01-01T00:00:00Z\n    run: echo late\n"
        )
        url = f"{srv.api.url}/jobs/{night}/log?follow=true"
        with requests.get(url, headers=srv.api.session.headers, stream=True, timeout=10) as r:
            lines = r.iter_lines()
            note = f"[clore-run] {night} has not started yet: not before 2030-01-01T00:00:00Z"
            assert next(lines).decode() == note
            assert next(lines).decode() == note  # again, WAITING_NOTE_S later
        plain = srv.api.get(f"/jobs/{night}/log")  # not following: the log alone, empty
        assert plain.status_code == 200 and plain.content == b""


class SlowToDie(PassingBackend):
    """Runs until killed, and is still dying when the server's loop stops (a process in its
    kill grace, a rental being cancelled)."""

    name = "slow"
    where = "slow-1"

    def __init__(self) -> None:
        self.service: Service | None = None

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        assert cancel.wait(timeout=30)
        wait_until(lambda: self.service is not None and not self.service.alive, what="the stop")
        return RunOutcome(-15, FailureKind.TEST_FAILURE, "killed by signal SIGTERM")


@pytest.mark.slow
def test_a_job_cancelled_just_before_a_shutdown_is_not_run_again(tmp_path: Path) -> None:
    backend = SlowToDie()
    with thread_server(tmp_path, backend=backend) as srv:
        backend.service = srv.service
        (job,) = srv.api.submit("jobs:\n  j:\n    retries: 2\n    run: x\n")
        srv.api.wait_status(job, {"running"})
        assert srv.api.request("DELETE", f"/jobs/{job}").status_code == 202
    with thread_server(tmp_path, backend=SlowToDie()) as srv:
        found = srv.api.job(job)
        assert (found["status"], found["attempts"]) == ("cancelled", 1)
        assert found["attempt_list"][0]["failure"] == "cancelled"
