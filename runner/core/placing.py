"""The scheduler and the server book as one core: jobs in order, each on a server.

The scheduler decides what may run (needs, conditions, retries, timeouts, cancels) and, with no
cap of its own, asks to start every job that is ready; the book decides where and when: it
holds each such job until a server is ready for it, renting, reusing or renting ahead within
the cap and the budget. An attempt the book cannot place ends as a failure of its own kind
(no offer, over budget, every host failed), so the retry table applies as to any other.

Events in, commands out, time passed in: the driver and the simulator drive it alike.

`clore-run run` makes one with the run's jobs and ends it when they are settled (every server
is given back). `clore-run serve` makes an ongoing one: jobs are added as they are submitted,
the servers outlive each job and are given back by the book's own rules, and a rent that no
rent could pass (a refused key) holds starts for a while instead of cancelling everything.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    BookTimer,
    CancelAll,
    Command,
    Event,
    HoldStarts,
    RunTimeout,
    SetTimer,
    StopCause,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job, JobResult, RunStatus
from runner.core.outcome import NeedOutcome, ordered, run_status
from runner.core.rentals import (
    CoreCommand,
    ServerEvent,
)
from runner.core.retry import backoff_s
from runner.core.scheduler import Entry, JobState, Phase, Scheduler
from runner.core.servers import ServerBook

CoreEvent = Event | ServerEvent


class PlacingCore:
    """Schedules one run onto the servers of `book`. `start(now)` once, then `handle`."""

    def __init__(
        self,
        jobs: Sequence[Job],
        book: ServerBook,
        run_timeout_s: float | None = None,
        backoff: Callable[[int], float] = backoff_s,
        *,
        ongoing: bool = False,
        on_fatal: Callable[[str, float], Event] | None = None,
    ) -> None:
        self.book = book
        self._jobs = jobs
        self._by_id = {j.id: j for j in jobs}
        self._run_timeout_s = run_timeout_s
        self._ongoing = ongoing
        # What a rent no rent could pass becomes: a cancel of the run, or (serve) a hold.
        self._on_fatal = on_fatal or _cancel_all
        book.stop_on_fatal = not ongoing
        if ongoing:  # a queue runs for days: a host that failed is tried again after an hour
            book.forgive_after_s = FORGIVE_HOST_AFTER_S
        self._results: list[JobResult] = []
        self._placer = _BookPlacer(book, None if ongoing else self._results)
        # Unbounded: the cap is on servers, which the book keeps.
        cap = _UNBOUNDED if ongoing else max(1, len(jobs))
        self._scheduler = Scheduler(cap, backoff, self._placer)
        self._out: list[CoreCommand] = []
        self._finished = False
        self._cancelled = False
        self._started = False

    @property
    def done(self) -> bool:
        return self._scheduler.idle

    @property
    def over(self) -> bool:
        """The run is over and its servers go back in one sweep (never, for an ongoing core)."""
        return not self._ongoing and self._scheduler.idle

    def __len__(self) -> int:
        """Jobs not settled yet."""
        return len(self._scheduler)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._scheduler

    @property
    def cancel_reason(self) -> str | None:
        return self._scheduler.stop_reason

    def results(self) -> tuple[JobResult, ...]:
        return ordered(self._results, self._jobs)

    def status(self, interrupted: bool = False) -> RunStatus:
        stop = StopCause.INTERRUPTED if interrupted else self._scheduler.stop_cause
        return run_status(self._results, self._by_id, stop)

    # -- what the driver asks of any core ------------------------------------------------------

    @property
    def idle(self) -> bool:
        return self._scheduler.idle

    @property
    def capacity(self) -> int:
        """Attempts that may run at once: one per server the cap allows."""
        return self.book.cap

    @property
    def stop_reason(self) -> str | None:
        return self._scheduler.stop_reason

    @property
    def stop_cause(self) -> StopCause | None:
        return self._scheduler.stop_cause

    def state(self, job_id: str) -> JobState | None:
        """The scheduler's answer, and for a job waiting for a server, what that server does."""
        state = self._scheduler.state(job_id)
        if state is None or state.phase is not Phase.PLACING:
            return state
        return dataclasses.replace(state, server=self.book.server_wait(job_id))

    def add(
        self, jobs: Sequence[Job | Entry], settled: Mapping[str, NeedOutcome], now: float
    ) -> list[CoreCommand]:
        """A run's one `add` (the jobs the book was made for), or an ongoing core's jobs as
        they come, with the outcomes of the settled jobs they need."""
        if not self._ongoing:
            if self._started or settled or len(jobs) != len(self._jobs):
                raise ValueError("a run's core takes its jobs once, when the run starts")
            return self.start(now)
        self.book.add_jobs([item.job if isinstance(item, Entry) else item for item in jobs], now)
        self._take(self._scheduler.add(jobs, settled, now), now)
        return self._settle(now)

    def start(self, now: float) -> list[CoreCommand]:
        self._started = True
        if self._run_timeout_s is not None:  # the run's timeout: a timer that cancels all
            self._out.append(SetTimer(now + self._run_timeout_s, RunTimeout()))
        # The book ranked these very jobs already: the scheduler need not rank them again.
        same = self.book.ranks.keys() == self._by_id.keys()
        ranks = self.book.ranks if same else None
        self._take(self._scheduler.add(self._jobs, {}, now, ranks), now)
        return self._settle(now)

    def handle(self, event: CoreEvent, now: float) -> list[CoreCommand]:
        if type(event) is AttemptPlaced and not self.book.dirty:
            # Half of all events: the scheduler only starts the attempt's timeout, and the
            # book, told nothing since its last decision, has nothing to decide.
            out = self._scheduler.placed(event.job_id, event.attempt, now)
            if not self.book.dirty and not self._placer.dropped:
                return out  # type: ignore[return-value]
            self._take(out, now)
            return self._settle(now)
        self._feed(event, now)
        return self._settle(now)

    # -- internals -------------------------------------------------------------------------

    def _feed(self, event: CoreEvent, now: float) -> None:
        if type(event) is AttemptEnded:  # most events that get here: tested first
            failure = event.attempt.failure
            self.book.attempt_ended(event.job_id, now, failure in _SERVER_FAILURES)
        elif isinstance(event, ServerEvent):
            self.book.handle(event, now)
            return
        elif isinstance(event, TimerFired):
            if isinstance(event.token, BookTimer):
                self.book.timer(event.token, now)
                return
            if isinstance(event.token, RunTimeout):
                reason = f"the run timed out after {self._run_timeout_s or 0:g} s"
                event = CancelAll(reason, StopCause.TIMED_OUT)
        elif isinstance(event, HoldStarts):
            self.book.hold(event.until)
        self._take(self._scheduler.handle(event, now), now)
        if self._scheduler.stop_reason is not None and not self._cancelled:
            self._cancelled = True
            self.book.cancel(now)

    def _take(self, commands: list[Command], now: float) -> None:
        """Pass the scheduler's commands on (the book heard of its starts, requeues and
        settled jobs as they were made). A job killed before it had a server ends here and
        now: nothing runs to be killed."""
        self._out.extend(commands)
        dropped = self._placer.dropped
        while dropped:  # a work list: an end fed back may drop more
            job_id, number, reason = dropped.popleft()
            attempt = Attempt(number, now, now, None, reason, "cancelled before it ran")
            self._out.extend(self._scheduler.handle(AttemptEnded(job_id, attempt), now))

    def _settle(self, now: float) -> list[CoreCommand]:
        """Let the book decide until it has nothing more to say to the scheduler."""
        book = self.book
        while True:
            self._out.extend(book.decide(now))
            if not book.unplaceable and book.stop_reason is None:
                break
            failed = book.take_unplaceable()
            stop, book.stop_reason = book.stop_reason, None
            if stop is not None:
                self._feed(self._on_fatal(stop, now), now)
            for item in failed:
                attempt = Attempt(item.attempt, now, now, None, item.failure, item.message)
                self._feed(AttemptEnded(item.job_id, attempt), now)
        if not self._ongoing and not self._finished and self._scheduler.idle:  # over
            self._finished = True
            self._out.extend(self.book.finish(now))
        out, self._out = self._out, []
        return out


FORGIVE_HOST_AFTER_S = 3600.0
_UNBOUNDED = 1 << 62  # the scheduler's cap on attempts out, when the book caps servers


def _cancel_all(reason: str, _now: float) -> Event:
    return CancelAll(reason, StopCause.INFRASTRUCTURE)


# An attempt that ended so: its server failed under it (the book keeps a rented one that was
# not reported lost, won back, for the retry).
_SERVER_FAILURES = (FailureKind.SERVER_LOST, FailureKind.SSH_FAILED)


class _BookPlacer:
    """The scheduler's placer: its attempts go to the book, which holds each until a server
    is ready for it. Told of each start, requeue and settled job as the scheduler makes it,
    in the order of its commands: one call each, no command to build and read back."""

    def __init__(self, book: ServerBook, results: list[JobResult] | None) -> None:
        self.book = book
        self.want = book.want
        self.requeued = book.requeued
        self._results = results  # None: an ongoing core (a queue keeps them in its store)
        # Attempts killed while they waited for a server: they end once the scheduler's
        # call returns (it cannot be fed while it runs), in the order they were killed.
        self.dropped: deque[tuple[str, int, FailureKind]] = deque()

    def settled(self, result: JobResult, now: float) -> None:
        self.book.settled(result.job_id, now)
        if self._results is not None:
            self._results.append(result)

    def kill(self, job_id: str, reason: FailureKind) -> bool:
        number = self.book.drop(job_id)
        if number is None:
            return True  # it runs on a server: the driver kills it there
        self.dropped.append((job_id, number, reason))
        return False
