"""Two `serve` instances on one PostgreSQL queue, both keeping servers warm, racing for one
submission's jobs: a warm server is never given to two jobs at once, a job never runs on two
servers, and a server stays with the instance that rented it.

Each instance's backend records every run it makes on a server (the server's order, the job,
when it began and ended on the monotonic clock), so the check stands on what ran where, not on
what the store says ran. The submission is queued before the instances start, and their
first claims are made to meet (a barrier inside each claim's transaction, just before its
UPDATE), so they race for the same rows every time.

With the claim's row locks removed (`PostgresQueue(..., skip_locked=False)`) this test fails
(2 runs of 3 when tried): both instances claim the same first job, the owner fence lets only
one start it, and the other is left holding a job it cannot start, so it takes no more work
and the other runs every job.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from runner.backends.base import Place, RunRequest
from runner.backends.clore.backend import CloreBackend
from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy
from runner.serve.service import Service, ServiceOptions
from runner.serve.submit import prepare_pipeline
from runner.stores.queue import QueueStore
from runner.stores.queue.postgres import PostgresQueue
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import wait_until

JOBS = 12
KEEP_15 = WarmPolicy(keep_warm_s=900.0)  # the fake clock never gets there: all stay warm


@dataclass(frozen=True)
class Run:
    instance: str
    server: str
    job: str
    began: float
    ended: float


class Runs:
    """Every run any instance's backend made, as it made it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: list[Run] = []

    def watch(self, backend: CloreBackend, instance: str) -> None:
        inner = backend.run

        def run(place: Place, request: RunRequest, *args: Any, **kwargs: Any) -> Any:
            began = time.monotonic()
            try:
                return inner(place, request, *args, **kwargs)
            finally:
                done = Run(instance, place.name, request.job.id, began, time.monotonic())
                with self.lock:
                    self.all.append(done)

        backend.run = run  # type: ignore[method-assign]

    def jobs(self) -> set[str]:
        with self.lock:
            return {r.job for r in self.all}


class RacingQueue(PostgresQueue):
    """The queue whose next claim, once armed, waits inside its transaction for the other
    instance's to get there too, then both run the same UPDATE at once."""

    def __init__(self, url: str, meet: threading.Barrier, armed: threading.Event) -> None:
        super().__init__(url)
        self._meet, self._armed = meet, armed

    def _claim_rows(self, conn: Any, token: str, key: str, limit: int, now: float) -> Any:
        if self._armed.is_set():
            self._meet.wait(timeout=30)
            self._armed.clear()
        return super()._claim_rows(conn, token, key, limit, now)


@dataclass
class Two:
    services: list[Service]
    runs: Runs
    store: QueueStore
    armed: threading.Event


@pytest.fixture
def two(setup: Setup, pg_url: str) -> Iterator[Two]:
    # Two clients on one API key, each pacing only itself on the shared fake clock: the fake's
    # per-key limits are not what this test is about.
    setup.fake.enforce_rate_limits = False
    runs = Runs()
    services: list[Service] = []
    meet, armed = threading.Barrier(2), threading.Event()
    with ExitStack() as stack:
        for instance in ("inst-a", "inst-b"):
            backend, _ = setup.backend(Pipeline(name="serve", jobs=(), concurrency=1), instance)
            runs.watch(backend, instance)
            store = RacingQueue(pg_url, meet, armed)
            stack.callback(store.close)
            options = ServiceOptions(
                data_dir=setup.tmp / instance,
                capacity=1,  # one server each: every job after an instance's first is warm
                backoff=lambda n: 0.0,
                instance=instance,
                warmth=KEEP_15,
            )
            service = Service(store, backend, options, setup.clock)
            services.append(service)
        for service in services:
            stack.callback(service.stop)
        yield Two(services, runs, services[0].store, armed)


def test_two_instances_never_give_one_warm_server_to_two_jobs_at_once(two: Two) -> None:
    pipeline = "jobs:\n" + "".join(f"  j{i}:\n    run: echo {i}\n" for i in range(JOBS))
    two.services[0].submit(prepare_pipeline(pipeline, ()), "pipeline")  # queued, unclaimed
    two.armed.set()
    for service in two.services:
        service.start()
    store, ids = two.store, {f"s1.j{i}" for i in range(JOBS)}
    wait_until(lambda: two.runs.jobs() == ids, 60, "every job to run")
    wait_until(lambda: store.counts().get("passed", 0) == JOBS, 60, "every job to pass")
    check(two.runs)


def check(runs: Runs, jobs: int = JOBS) -> None:
    """No job ran twice, no server ran two jobs at once or for two instances; and the test
    did what it is about: both instances ran jobs, on servers kept warm."""
    by_job: dict[str, list[Run]] = {}
    by_server: dict[str, list[Run]] = {}
    with runs.lock:
        for run in runs.all:
            by_job.setdefault(run.job, []).append(run)
            by_server.setdefault(run.server, []).append(run)
    twice = {job: [(r.instance, r.server) for r in rs] for job, rs in by_job.items() if len(rs) > 1}
    assert twice == {}, f"jobs run more than once, on two servers: {twice}"
    assert len(by_job) == jobs
    for server, on in by_server.items():
        assert len({r.instance for r in on}) == 1, f"{server} went to two instances"
        on.sort(key=lambda r: r.began)
        for one, two_ in itertools.pairwise(on):
            assert two_.began >= one.ended, f"{server} ran {one.job} and {two_.job} at once"
    assert len({r.instance for r in runs.all}) == 2, "one instance ran every job"
    assert max(len(on) for on in by_server.values()) >= 2


def test_the_check_sees_a_server_given_to_two_jobs_at_once() -> None:
    """The check itself, on runs made up: two jobs overlapping on one server are caught (the
    race above never makes them, so this is where that half of the check is seen to fail)."""
    runs = Runs()
    runs.all = [
        Run("inst-a", "clore-1", "s1.j0", 0.0, 2.0),
        Run("inst-a", "clore-1", "s1.j1", 1.0, 3.0),  # began before j0 ended
        Run("inst-b", "clore-2", "s1.j2", 0.0, 1.0),
        Run("inst-b", "clore-2", "s1.j3", 1.0, 2.0),
    ]
    with pytest.raises(AssertionError, match=re.escape("clore-1 ran s1.j0 and s1.j1 at once")):
        check(runs, jobs=4)
    runs.all[1] = Run("inst-b", "clore-1", "s1.j1", 2.0, 3.0)  # after j0, but another instance
    with pytest.raises(AssertionError, match="clore-1 went to two instances"):
        check(runs, jobs=4)
