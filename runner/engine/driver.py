"""The one imperative shell: feeds events to the pure core, carries out its commands, and
reports what happened to journals.

It owns what the core must not: the event queue (worker threads, signal handlers, API threads
and the backend's rent and release threads post to it; only the loop thread touches the core),
timers on the injected clock, a kill flag per attempt, the worker pool and the attempt runner.
`clore-run run` drives it until idle with the console and reports as its journal; `clore-run
serve` drives it for as long as it runs with the queue store as its journal.

The core is always the one that holds servers (`PlacingCore`), whatever the backend: it decides
which server runs which job, and on Clore which to rent and give back. The backend carries
that out (server_hands): each rent and release on a thread of its own, what it reports posted
back to the loop, each attempt on the server the core chose.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from runner.backends.base import NO_STAGES, Backend, Place, StageSink
from runner.clock import Clock
from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptRecorded,
    CancelAll,
    Event,
    KillAttempt,
    Requeued,
    SetTimer,
    Settled,
    StopCause,
    TimerFired,
    TimerToken,
    Wake,
)
from runner.core.model import Attempt, FailureKind, Job
from runner.core.outcome import NeedOutcome
from runner.core.placing import PlacingCore
from runner.core.rentals import (
    CoreCommand,
    JobNote,
    ReleaseServer,
    RentServer,
    ServerEvent,
    ServerLost,
    StartOn,
)
from runner.core.scheduler import Entry
from runner.engine.attempt import Kill, Ran
from runner.engine.journal import Journal
from runner.engine.server_hands import ServerHands
from runner.engine.timers import Timers
from runner.engine.workers import Task, Workers, wait_all
from runner.report.facts import SERVER_WAIT_S, WARM_SERVER

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")


class Attempts(Protocol):
    """What runs each attempt on the server the core chose: runner.engine.attempt.AttemptRunner (a
    job's script), or `runner start`'s install of a GitHub runner. Never raises."""

    def run(
        self,
        job: Job,
        number: int,
        server: int,
        timeout_s: float,
        kill: threading.Event,
        placed: Callable[[Place], None],
    ) -> Ran: ...


CANCEL_GRACE_S = 5.0  # after a cancel, how long attempts get to report before they are settled


def _say_nothing(_text: str) -> None:
    return None


def _no_events(_event: Event, _now: float) -> Sequence[Event]:
    return ()


def _no_stages(_job: Job) -> StageSink:
    return NO_STAGES


@dataclass(frozen=True)
class DriverOptions:
    """What differs between the shells that drive the core (`run` and `serve`)."""

    # What an attempt's "nothing can run now" (key refused, no balance) becomes.
    must_stop: Callable[[str, float], Event]
    # Events fed to the core before an attempt's end is: serve's daily spend hold, which
    # must be in place before that end starts the next jobs.
    before_attempt_ends: Callable[[Event, float], Sequence[Event]] = _no_events
    notice: Callable[[str], None] = _say_nothing  # a line for the person watching
    # Who hears a rent's stages (renting, booting, connecting) for the job it is meant for.
    rent_stages: Callable[[Job], StageSink] = _no_stages
    tick_s: float = 0.5  # the longest the loop sleeps before re-reading the clock
    cancel_grace_s: float = CANCEL_GRACE_S
    # serve: each attempt's facts say whether its server was warm and how long the job
    # waited for one (a run's reports read the wait from the attempt's own times).
    server_waits: bool = False


@dataclass(frozen=True)
class _Call:
    """Run `fn(now)` on the loop thread, its answer in `reply`."""

    fn: Callable[[float], Any]
    reply: Future[Any]


@dataclass(frozen=True)
class _Placed:
    """An attempt holds its place (posted by its worker); the script starts now."""

    event: AttemptPlaced
    place: Place


@dataclass(frozen=True)
class _MustStop:
    """A backend said nothing can run now (posted by a worker)."""

    reason: str


class _Quit:
    pass


@dataclass(frozen=True)
class _FromServer:
    """What an adapter says about a server (posted from any thread)."""

    event: ServerEvent


_Posted = (
    Event | _Call | _Placed | _MustStop | _Quit | _FromServer | None
)  # None: re-read the clock


@dataclass(frozen=True)
class _Deadline:
    """The run's own timeout: cancels everything."""

    reason: str


class _GraceOver:
    """The cancel's grace is over: settle the attempts that have not ended."""


_Token = TimerToken | _Deadline | _GraceOver  # the core's timers and the driver's own


@dataclass
class _Out:
    """An attempt handed to a worker."""

    number: int
    started_at: float
    kill: Kill = dataclasses.field(default_factory=Kill)
    placed: bool = False


class Driver:
    """Carries the core's commands out on one backend. `add`/`feed` only on the loop thread.

    The core is the one that holds servers (`PlacingCore`), typed as such: no other core
    exists to drive."""

    def __init__(
        self,
        core: PlacingCore,
        backend: Backend,
        runner: Attempts,
        journal: Journal,
        clock: Clock,
        options: DriverOptions,
    ) -> None:
        self.core = core
        self.backend = backend
        self.runner = runner
        self.journal = journal
        self.clock = clock
        self.options = options
        self._events: queue.SimpleQueue[_Posted] = queue.SimpleQueue()
        self._timers: Timers[_Token] = Timers()
        self._jobs: dict[str, Job] = {}  # unsettled jobs (the core forgets them when settled)
        self._out: dict[str, _Out] = {}
        self._pool = Workers(max(1, core.capacity))
        self._tasks: list[Task] = []
        self._servers = ServerHands(backend, self._report, options.notice, options.rent_stages)
        # Servers that already exist (SSH hosts, local slots) are let go only after their
        # attempts have stopped: their files are fetched on the way out.
        self._gives_back_early = core.book.renting
        self._places_held = 0
        self._cancel_at: float | None = None

    # -- any thread ------------------------------------------------------------------------

    def post(self, event: Event | None = None) -> None:
        """Queue an event for the loop (None: re-read the clock). Safe from a signal handler:
        SimpleQueue.put is reentrant."""
        self._events.put(event)

    def cancel(self, reason: str, cause: StopCause = StopCause.INTERRUPTED) -> None:
        self.post(CancelAll(reason, cause))

    def call(self, fn: Callable[[float], T]) -> Future[T]:
        """Run `fn(now)` on the loop thread; its answer comes in the future."""
        # Imported here: only serve's API threads ask, and concurrent.futures loads logging,
        # which every `run` would pay for at start-up.
        from concurrent.futures import Future

        reply: Future[T] = Future()
        self._events.put(_Call(fn, reply))
        return reply

    def killed_jobs(self) -> set[str]:
        """Jobs whose attempt was told to stop (loop thread)."""
        return {job_id for job_id, out in self._out.items() if out.kill.is_set()}

    @property
    def places_held(self) -> int:
        """Attempts on a place right now (an int written by the loop thread only)."""
        return self._places_held

    @property
    def give_back_warnings(self) -> list[str]:
        """What the give-back could not confirm (a cancel refused, an order never found)."""
        return self._servers.give_back_warnings

    # -- the loop thread -------------------------------------------------------------------

    def add(
        self, jobs: Sequence[Job | Entry], settled: Mapping[str, NeedOutcome], now: float
    ) -> None:
        for item in jobs:
            job = item.job if isinstance(item, Entry) else item
            self._jobs[job.id] = job
        self._apply(self.core.add(jobs, settled, now), now)

    def stop_attempt(self, job_id: str, number: int, failure: FailureKind, note: str) -> None:
        """Loop thread: end one attempt as `failure` with `note`, whether or not it began
        (serve's journal could not record its start)."""
        out = self._out.get(job_id)
        if out is not None and out.number == number:
            out.kill.stop(failure, note)

    def feed(self, event: Event, now: float) -> None:
        self._apply(self.core.handle(event, now), now)

    def run_until_idle(self, timeout_s: float | None = None) -> None:
        """`clore-run run`: the loop, until every job added is settled. The run's timeout is a
        timer that cancels everything."""
        if timeout_s is not None:
            reason = f"the run timed out after {timeout_s:g} s"
            self._timers.set(self.clock.time() + timeout_s, _Deadline(reason))
        while not self.core.idle:
            self.step()

    def quit(self) -> None:
        self._events.put(_Quit())

    def step(self) -> bool:
        """Wait for one event (or the next timer) and handle it; False when told to quit."""
        wait_s = self.options.tick_s
        next_at = self._timers.next_at()
        if next_at is not None:
            wait_s = min(wait_s, max(0.0, next_at - self.clock.time()))
        try:
            posted = self._events.get(timeout=wait_s)
        except queue.Empty:
            posted = None
        if isinstance(posted, _Quit):
            return False
        now = self.clock.time()
        if posted is not None:
            self._on(posted, now)
        for token in self._timers.due(now):
            self._fire(token, now)
        return True

    def drain_attempts(self, grace_s: float) -> Iterator[AttemptEnded]:
        """With the loop stopped: kill every attempt out and hand over the ends that arrive
        within `grace_s`, in order, for the caller to record (serve's hand-over at shutdown)."""
        for out in self._out.values():
            out.kill.set()
        deadline = self.clock.now() + grace_s
        while self._out:
            try:
                posted = self._events.get(timeout=max(0.0, deadline - self.clock.now()))
            except queue.Empty:
                return
            if isinstance(posted, AttemptEnded) and posted.job_id in self._out:
                self._forget(posted.job_id)
                yield posted
            if self.clock.now() >= deadline:
                return

    def close(self) -> None:
        """Wait for workers (what is left of a cancel's grace), then give every place back.
        A failure here is reported, never raised: the run's reports must still be written
        (and a rental left open stays in the ledger for `cleanup`)."""
        self.finish_work()
        self.give_back()

    def finish_work(self) -> None:
        """The first half of `close`: wait for the workers (what is left of a cancel's grace)."""
        grace = self.options.cancel_grace_s
        if self._cancel_at is not None:
            # What is left of the grace the cancel gave: not a second one after it, which
            # would overrun the time CI allows between SIGINT and SIGKILL.
            grace = max(0.0, self._cancel_at + grace - self.clock.time())
        wait_all(self._tasks, grace)
        self._pool.shutdown()

    def give_back(self) -> None:
        """The second half of `close`: every place back (a slow API makes this the slow part)."""
        self._servers.give_back(self._cancel_at is not None, self.options.cancel_grace_s)

    # -- events ----------------------------------------------------------------------------

    def _on(self, posted: _Posted, now: float) -> None:
        match posted:
            case AttemptEnded():
                self._attempt_ended(posted, now)
            case _Placed():
                self._placed(posted.event, posted.place, now)
            case _Call():
                try:
                    posted.reply.set_result(posted.fn(now))
                except Exception as exc:
                    posted.reply.set_exception(exc)
                    raise  # the loop's owner hears of it too: nobody may wait for the reply
            case _MustStop():
                self.feed(self.options.must_stop(posted.reason, now), now)
            case _FromServer():
                self._servers.rent_over(posted.event)
                self._apply(self.core.handle(posted.event, now), now)
            case None | _Quit():
                pass
            case _:
                self.feed(posted, now)

    def _attempt_ended(self, event: AttemptEnded, now: float) -> None:
        out = self._out.get(event.job_id)
        if out is None or out.number != event.attempt.number:
            return  # settled already (a straggler's late report)
        self._forget(event.job_id)
        for first in self.options.before_attempt_ends(event, now):
            self.feed(first, now)
        self.feed(event, now)

    def _placed(self, event: AttemptPlaced, place: Place, now: float) -> None:
        out = self._out.get(event.job_id)
        if out is None or out.number != event.attempt or out.placed:
            return  # settled already (a straggler's late report)
        out.placed = True
        self._places_held += 1
        with self.journal.batch():
            self.journal.attempt_placed(self._jobs[event.job_id], event.attempt, place, now)
        self.feed(event, now)

    def _forget(self, job_id: str) -> None:
        if self._out.pop(job_id).placed:
            self._places_held -= 1

    def _fire(self, token: _Token, now: float) -> None:
        if isinstance(token, _Deadline):
            self.feed(CancelAll(token.reason, StopCause.TIMED_OUT), now)
        elif isinstance(token, _GraceOver):
            self._settle_stragglers(now)
        else:
            self.feed(TimerFired(token), now)

    # -- commands --------------------------------------------------------------------------

    def _apply(self, commands: Sequence[CoreCommand], now: float) -> None:
        if not commands:
            return
        with self.journal.batch():
            starts = [self._record(cmd, now) for cmd in commands]
        works = [work for work in starts if work is not None]
        if works:
            self._tasks = [task for task in self._tasks if not task.done()]
            self._tasks += self._pool.submit(works)
        if self._cancel_at is None and self.core.stop_reason is not None:
            self._stopping(now)

    def _record(self, cmd: CoreCommand, now: float) -> Callable[[], None] | None:
        """Carry one command out; a start answers the work to hand to a worker once the
        journal has recorded the batch."""
        match cmd:
            case StartOn():
                return self._start_on(cmd, now)
            case RentServer():
                # A rent for warmth is for no job: the job it boots as stands in.
                self._servers.rent(
                    cmd, cmd.warm if cmd.warm is not None else self._jobs[cmd.for_job]
                )
            case ReleaseServer():
                self._release(cmd)
            case JobNote():
                self.options.notice(f"{cmd.job_id}: {cmd.text}")
            case KillAttempt():
                out = self._out.get(cmd.job_id)
                if out is not None:
                    out.kill.stop(cmd.reason)
            case SetTimer():
                self._timers.set(cmd.at, cmd.token)
                self._say_waiting(cmd)
            case AttemptRecorded():
                self.journal.attempt_ended(self._jobs[cmd.job_id], cmd.attempt)
            case Requeued():
                job = self._jobs[cmd.job_id]
                self.journal.requeued(job, cmd.at, cmd.retries_used, cmd.infra_used)
            case Settled():
                self.journal.settled(self._jobs.pop(cmd.result.job_id), cmd.result, now)
        return None

    def _say_waiting(self, timer: SetTimer) -> None:
        """A job waiting for its not-before time (a retry's wait is told as `requeued`)."""
        token = timer.token
        if isinstance(token, Wake):
            state = self.core.state(token.job_id)
            if state is not None and state.attempts == 0:
                self.journal.waits_until(self._jobs[token.job_id], timer.at)

    def _stopping(self, now: float) -> None:
        """Everything was cancelled: attempts get a grace period to stop, and a renting backend
        starts giving its servers back at once, beside the kills, so that all of it fits in
        the time CI allows between SIGINT and SIGKILL."""
        self._cancel_at = now
        self.options.notice(f"cancelling: {self.core.stop_reason}")
        self._timers.set(now + self.options.cancel_grace_s, _GraceOver())
        if self._gives_back_early:
            self._servers.give_back_early()

    def _settle_stragglers(self, now: float) -> None:
        """Attempts that did not stop when told are reported as cancelled; the backend's
        shutdown frees their places."""
        for job_id, out in list(self._out.items()):
            attempt = Attempt(
                out.number, out.started_at, now, None, FailureKind.CANCELLED, "did not stop"
            )
            self._attempt_ended(AttemptEnded(job_id, attempt), now)

    def _release(self, cmd: ReleaseServer) -> None:
        """Give a server back off the loop; at the end of a run, or once it is cancelled, the
        backend's shutdown gives back everything left in one sweep instead."""
        if cmd.rented and not self.core.over and self._cancel_at is None:
            self._servers.release(cmd)

    def _report(self, event: ServerEvent) -> None:
        """What an adapter says about a server, from any thread."""
        self._events.put(_FromServer(event))

    # -- attempts --------------------------------------------------------------------------

    def _start_on(self, cmd: StartOn, now: float) -> Callable[[], None]:
        """An attempt on the server the core chose: the attempt runner gets it as its place."""
        job = self._jobs[cmd.job_id]
        out = _Out(cmd.attempt, now)
        self._out[job.id] = out
        self.journal.attempt_started(job, cmd.attempt, now)
        said: dict[str, str] = {}
        if self.options.server_waits:
            said = {WARM_SERVER: "true" if cmd.warm else "false"}
            said[SERVER_WAIT_S] = f"{cmd.waited_s:.3f}"
        return functools.partial(
            self._work, job, cmd.attempt, cmd.timeout_s, out.kill, cmd.server, said
        )

    def _work(
        self,
        job: Job,
        number: int,
        timeout_s: float,
        kill: Kill,
        server: int,
        said: Mapping[str, str],
    ) -> None:
        """On a worker: the attempt, and what came of it posted to the loop."""

        def placed(place: Place) -> None:
            self._events.put(_Placed(AttemptPlaced(job.id, number), place))

        ran = self.runner.run(job, number, server, timeout_s, kill, placed)  # never raises
        if said:
            facts = {**ran.attempt.facts, **said}
            ran = Ran(dataclasses.replace(ran.attempt, facts=facts), ran.stop_reason)
        if self.backend.lost(server):
            # Before the end: the core must not place the retry on the server it lost.
            self._events.put(_FromServer(ServerLost(server, ran.attempt.message)))
        self._events.put(AttemptEnded(job.id, ran.attempt))
        if ran.stop_reason:  # after the end, so this job ends as `error`, not as cancelled
            self._events.put(_MustStop(ran.stop_reason))
