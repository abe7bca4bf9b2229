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
from collections.abc import Callable, Mapping, Sequence

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptRecorded,
    CancelAll,
    Command,
    Event,
    HoldStarts,
    KillAttempt,
    Requeued,
    SetTimer,
    Settled,
    StartAttempt,
    StopCause,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job, JobResult, RunStatus
from runner.core.outcome import NeedOutcome, ordered, run_status
from runner.core.rentals import (
    CoreCommand,
    RentFailed,
    ServerEvent,
    ServerLost,
    ServerReady,
    ServerReleased,
)
from runner.core.retry import backoff_s
from runner.core.scheduler import Entry, JobState, Phase, Scheduler
from runner.core.servers import TIMER, ServerBook

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
        # Unbounded: the cap is on servers, which the book keeps.
        self._scheduler = Scheduler(_UNBOUNDED if ongoing else max(1, len(jobs)), backoff)
        self._results: list[JobResult] = []
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
            self._out.append(SetTimer(now + self._run_timeout_s, _RUN_TIMEOUT))
        # The book ranked these very jobs already: the scheduler need not rank them again.
        same = self.book.ranks.keys() == self._by_id.keys()
        ranks = self.book.ranks if same else None
        self._take(self._scheduler.add(self._jobs, {}, now, ranks), now)
        return self._settle(now)

    def handle(self, event: CoreEvent, now: float) -> list[CoreCommand]:
        if type(event) is AttemptPlaced and not self.book.dirty:
            # Half of all events: the scheduler only starts the attempt's timeout, and the
            # book, told nothing since its last decision, has nothing to decide.
            out = self._scheduler.handle(event, now)
            for cmd in out:  # a loop, not all() over a generator: this runs for every job
                if type(cmd) not in _PASSED_ON:
                    break
            else:
                return out  # type: ignore[return-value]
            self._take(out, now)
            return self._settle(now)
        self._feed(event, now)
        return self._settle(now)

    # -- internals -------------------------------------------------------------------------

    def _feed(self, event: CoreEvent, now: float) -> None:
        if type(event) in _SERVER_EVENTS:  # one look-up: this runs for every event
            self.book.handle(event, now)  # type: ignore[arg-type]
            return
        if isinstance(event, AttemptEnded):
            failure = event.attempt.failure
            self.book.attempt_ended(event.job_id, now, failure in _SERVER_FAILURES)
        elif isinstance(event, TimerFired):
            if _is_book_timer(event.token):
                self.book.timer(event.token, now)
                return
            if event.token == _RUN_TIMEOUT:
                reason = f"the run timed out after {self._run_timeout_s or 0:g} s"
                event = CancelAll(reason, StopCause.TIMED_OUT)
        elif isinstance(event, HoldStarts):
            self.book.hold(event.until)
        self._take(self._scheduler.handle(event, now), now)  # type: ignore[arg-type]
        if self._scheduler.stop_reason is not None and not self._cancelled:
            self._cancelled = True
            self.book.cancel(now)

    def _take(self, commands: list[Command], now: float) -> None:
        """Pass the scheduler's commands on, turning its starts into wants of the book. A
        job killed before it had a server ends here and now: nothing runs to be killed."""
        book, out = self.book, self._out
        todo = commands  # a work list: ends fed back add their commands to it
        i = 0
        while i < len(todo):
            cmd = todo[i]
            i += 1
            if type(cmd) in _PASSED_ON:  # most commands: one look-up, not four isinstance
                out.append(cmd)
            elif isinstance(cmd, StartAttempt):
                book.want(cmd.job_id, cmd.attempt, cmd.timeout_s, now)
            elif isinstance(cmd, KillAttempt) and (number := book.drop(cmd.job_id)) is not None:
                attempt = Attempt(number, now, now, None, cmd.reason, "cancelled before it ran")
                ended = self._scheduler.handle(AttemptEnded(cmd.job_id, attempt), now)
                todo, i = [*todo[i:], *ended], 0
            else:
                if isinstance(cmd, Requeued):
                    book.requeued(cmd.job_id, cmd.at)
                elif isinstance(cmd, Settled):
                    book.settled(cmd.result.job_id, now)
                    if not self._ongoing:  # a queue keeps its results in its store
                        self._results.append(cmd.result)
                out.append(cmd)

    def _settle(self, now: float) -> list[CoreCommand]:
        """Let the book decide until it has nothing more to say to the scheduler."""
        book = self.book
        while True:
            self._out.extend(book.decide(now))
            if not book.unplaceable and book.stop_reason is None:
                break
            failed, book.unplaceable = book.unplaceable, []
            stop, book.stop_reason = book.stop_reason, None
            if stop is not None:
                self._feed(self._on_fatal(stop, now), now)
            for item in failed:
                attempt = Attempt(item.attempt, now, now, None, item.failure, item.message)
                self._feed(AttemptEnded(item.job_id, attempt), now)
        if self.over and not self._finished:
            self._finished = True
            self._out.extend(self.book.finish(now))
        out, self._out = self._out, []
        return out


_RUN_TIMEOUT = ("run_timeout",)
FORGIVE_HOST_AFTER_S = 3600.0
_UNBOUNDED = 1 << 62  # the scheduler's cap on attempts out, when the book caps servers


def _cancel_all(reason: str, _now: float) -> Event:
    return CancelAll(reason, StopCause.INFRASTRUCTURE)


# An attempt that ended so: its server failed under it (the book keeps a rented one that was
# not reported lost, won back, for the retry).
_SERVER_FAILURES = (FailureKind.SERVER_LOST, FailureKind.SSH_FAILED)


_SERVER_EVENTS = frozenset({ServerReady, ServerLost, RentFailed, ServerReleased})
# Scheduler commands the book has nothing to do with: passed on as they are.
_PASSED_ON = frozenset({SetTimer, AttemptRecorded})


def _is_book_timer(token: object) -> bool:
    return isinstance(token, tuple) and bool(token) and token[0] == TIMER
