"""The driver's rent and release threads: many at once, each reporting back from its own thread.

The core is pure and single-threaded; the driver rents and gives back off its loop, on a thread
each, and those threads may only post what happened (ServerReady, RentFailed, ServerReleased) to
the loop's queue. These tests hold the driver to that under real concurrency: the first rents
are held at a barrier and report all at once, and a watched core records every thread that
enters it and any overlap. Handing a thread's report to the core directly (instead of posting
it) fails them.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from runner.backends.base import (
    NO_STAGES,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    ServerReport,
    StageSink,
)
from runner.clock import SYSTEM_CLOCK
from runner.core.book_offer import BookOffer
from runner.core.events import CancelAll, Event, StopCause
from runner.core.model import Attempt, GpuAsk, Job, JobResult, JobStatus, Provisioning
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Quote,
    RentFailed,
    RentServer,
    ServerReady,
    ServerReleased,
)
from runner.core.servers import ServerBook
from runner.core.simulate_market import ModelMarket
from runner.engine.attempt import AttemptRunner
from runner.engine.console import Console
from runner.engine.driver import Driver, DriverOptions

TYPES = ("RTX 3090", "RTX 4090", "A100")
OFFERS = tuple(Quote(f"{t}#{i}", t, 1, 0.1 + i / 100) for t in TYPES for i in range(40))
CAP = 6


class WatchedCore(PlacingCore):
    """A PlacingCore that records which threads enter it, and whether two ever overlap."""

    def __init__(self, jobs: Sequence[Job], book: ServerBook) -> None:
        super().__init__(jobs, book)
        self.threads: set[int] = set()
        self.overlaps = 0
        self._inside = threading.Lock()

    def handle(self, event: CoreEvent, now: float) -> list[CoreCommand]:
        self.threads.add(threading.get_ident())
        if not self._inside.acquire(blocking=False):
            self.overlaps += 1
            self._inside.acquire()
        try:
            return super().handle(event, now)
        finally:
            self._inside.release()


@dataclass
class ThreadedMarket:
    """A backend whose rents and releases report from the driver's threads. The first
    `together` rents wait for each other at a barrier, then report at once; every tenth rent
    fails (its job rents again)."""

    together: int
    rented: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    shut_down: bool = False
    name: str = "threaded"
    releasing: int = 0  # releases under way
    released_under_shutdown: bool = False  # the shutdown's sweep began while one was
    release_started: threading.Event = field(default_factory=threading.Event)
    proceed: threading.Event = field(default_factory=threading.Event)  # releases may end

    def __post_init__(self) -> None:
        self._barrier = threading.Barrier(self.together)
        self._lock = threading.Lock()

    # -- the core's servers -----------------------------------------------------------------

    def book_offer(self, jobs: Sequence[Job], cap: int) -> BookOffer:
        raise NotImplementedError  # the test makes the book

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        with self._lock:
            self.rented.append(cmd.server)
            first = len(self.rented) <= self.together
        if first:
            self._barrier.wait(timeout=10)
        if cmd.server % 10 == 0:
            report(RentFailed(cmd.server, "the host did not start"))
        else:
            report(ServerReady(cmd.server))

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        return Place(f"server-{server}")

    def attempt_done(self, place: Place) -> None:
        return None

    def lost(self, server: int) -> bool:
        return False

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        with self._lock:
            self.released.append(server)
            self.releasing += 1
        self.release_started.set()
        self.proceed.wait(timeout=10)
        with self._lock:
            self.releasing -= 1
        report(ServerReleased(server, 0.0))

    @property
    def broken_barrier(self) -> bool:
        return self._barrier.broken

    # -- the rest of a backend ----------------------------------------------------------------

    def capacity(self) -> int | None:
        return None

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        return RunOutcome(0, None)

    def shutdown(self) -> None:
        with self._lock:
            self.released_under_shutdown = self.releasing > 0
        self.shut_down = True


class _Results:
    def __init__(self) -> None:
        self.results: dict[str, JobResult] = {}

    def batch(self) -> AbstractContextManager[None]:
        return nullcontext()

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        return None

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        return None

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        return None

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        return None

    def waits_until(self, job: Job, at: float) -> None:
        return None

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.results[job.id] = result


def _jobs(n: int) -> list[Job]:
    """Roots on every GPU type, then jobs needing one root each on another type: servers are
    rented, given back (no job left fits them) and rented again while the run goes on."""
    jobs = []
    for i in range(n):
        needs = (f"j{i - CAP}",) if i >= CAP else ()
        gpu = GpuAsk(type=TYPES[i % len(TYPES)] if i < CAP else TYPES[(i + 1) % len(TYPES)])
        jobs.append(Job(f"j{i}", f"j{i}", "true", i, needs, gpu=gpu, workspace=False))
    return jobs


def _stop(reason: str, _now: float) -> Event:
    return CancelAll(reason, StopCause.INFRASTRUCTURE)


def _driver(core: PlacingCore, market: ThreadedMarket, out: Path) -> tuple[Driver, _Results]:
    runner = AttemptRunner(market, out, SYSTEM_CLOCK, Console(io.StringIO()))
    results = _Results()
    options = DriverOptions(_stop)
    return Driver(core, market, runner, results, SYSTEM_CLOCK, options), results


def _book(jobs: Sequence[Job]) -> ServerBook:
    return ServerBook(
        jobs,
        CAP,
        market=ModelMarket(OFFERS),
        provisioning=Provisioning.ON_DEMAND,
        boot=BootTimes(default_s=0.0, allowance_s=60.0),
    )


def test_rent_and_release_threads_only_post_to_the_loop(tmp_path: Path) -> None:
    jobs = _jobs(4 * CAP)
    core = WatchedCore(jobs, _book(jobs))
    market = ThreadedMarket(together=CAP)
    market.proceed.set()
    driver, results = _driver(core, market, tmp_path)
    driver.add(jobs, {}, SYSTEM_CLOCK.time())
    driver.run_until_idle(timeout_s=30.0)
    driver.close()

    assert core.threads == {threading.get_ident()}  # the loop's thread, and no other
    assert core.overlaps == 0
    assert {r.status for r in results.results.values()} == {JobStatus.PASSED}
    assert len(results.results) == len(jobs)
    # Every report reached the core: what it still holds at the end is what was rented and
    # neither failed nor given back during the run; the shutdown sweeps that up.
    # The first rents ran at once (the barrier let them through together), some failed and
    # were rented again, servers were given back while the run went on, each once.
    assert not market.broken_barrier
    assert len(market.rented) > CAP and [s for s in market.rented if s % 10 == 0]
    assert market.released and len(set(market.released)) == len(market.released)
    assert market.shut_down


def test_the_shutdown_sweep_waits_for_a_release_under_way(tmp_path: Path) -> None:
    # a's 3090 is no use to b (an A100): it is given back while b runs, and that release is
    # held open. The run ends first; its give-back must wait for that release to end before
    # the backend's sweep (which checks the ledger for what is still held) begins.
    jobs = [
        Job("a", "a", "true", 0, gpu=GpuAsk(type="3090"), workspace=False),
        Job("b", "b", "true", 1, ("a",), gpu=GpuAsk(type="A100"), workspace=False),
    ]
    market = ThreadedMarket(together=1)
    driver, results = _driver(PlacingCore(jobs, _book(jobs)), market, tmp_path)
    driver.add(jobs, {}, SYSTEM_CLOCK.time())
    driver.run_until_idle(timeout_s=30.0)
    assert [r.status for r in results.results.values()] == [JobStatus.PASSED] * 2
    assert market.release_started.wait(timeout=10) and not market.proceed.is_set()
    driver.finish_work()
    giving_back = threading.Thread(target=driver.give_back)
    giving_back.start()
    giving_back.join(timeout=0.3)  # it must still wait: the release is under way
    market.proceed.set()
    giving_back.join(timeout=10)
    assert not giving_back.is_alive() and market.shut_down
    assert not market.released_under_shutdown
