"""The one imperative shell: feeds events to the pure core, carries out its commands, and
reports what happened to journals.

It owns what the core must not: the event queue (worker threads, signal handlers, API threads
and the backend's rent and release threads post to it; only the loop thread touches the core),
timers on the injected clock, a kill flag per attempt, the worker pool and the attempt runner.
`clore-run run` drives it until idle with the console and reports as its journal; `clore-run
serve` drives it for as long as it runs with the queue store as its journal.

The core is always the one that holds servers (`PlacingCore`), whatever the backend: it decides
which server runs which job, and on Clore which to rent and give back. The backend carries
that out: each rent and release on a thread of its own, what it reports posted back to the
loop, each attempt on the server the core chose.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
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
from runner.core.model import Attempt, FailureKind, Job, JobResult
from runner.core.outcome import NeedOutcome
from runner.core.placing import PlacingCore
from runner.core.rentals import (
    CoreCommand,
    JobNote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerEvent,
    ServerLost,
    ServerReleased,
    StartOn,
)
from runner.core.scheduler import Entry
from runner.engine.attempt import Kill, Ran
from runner.errors import CloreRunError
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


class Journal(Protocol):
    """Where the driver reports what happened, in the order it happened (loop thread only)."""

    def batch(self) -> AbstractContextManager[None]:
        """Around the reports of one event's commands: a store writes them in one transaction,
        before any attempt among them starts."""
        ...

    def attempt_started(self, job: Job, number: int, now: float) -> None: ...

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        """The attempt holds `place` (a server, its facts and price): its script starts now."""
        ...

    def attempt_ended(self, job: Job, attempt: Attempt) -> None: ...

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None: ...

    def waits_until(self, job: Job, at: float) -> None:
        """The job may not start before `at` (its not-before time)."""
        ...

    def settled(self, job: Job, result: JobResult, now: float) -> None: ...


class Journals:
    """Several journals as one, told in order."""

    def __init__(self, *journals: Journal) -> None:
        self._all = journals

    def batch(self) -> AbstractContextManager[None]:
        if len(self._all) == 1:  # `run`'s case, around every event: no stack to build
            return self._all[0].batch()
        return self._batch_all()

    @contextmanager
    def _batch_all(self) -> Iterator[None]:
        with ExitStack() as stack:
            for j in self._all:
                stack.enter_context(j.batch())
            yield

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        for j in self._all:
            j.attempt_started(job, number, now)

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        for j in self._all:
            j.attempt_placed(job, number, place, now)

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        for j in self._all:
            j.attempt_ended(job, attempt)

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        for j in self._all:
            j.requeued(job, at, retries_used, infra_used)

    def waits_until(self, job: Job, at: float) -> None:
        for j in self._all:
            j.waits_until(job, at)

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        for j in self._all:
            j.settled(job, result, now)


def _say_nothing(_text: str) -> None:
    return None


def _no_events(_event: Event, _now: float) -> Sequence[Event]:
    return ()


class DriverOptions:
    """What differs between the shells that drive the core (`run` and `serve`).

    This module's small classes are plain ones with slots, not dataclasses: making a
    dataclass runs generated code at import (~0.5 ms each here), which every `run` paid for
    seven of them, and a frozen one's __init__ sets each field through object.__setattr__."""

    __slots__ = (
        "before_attempt_ends",
        "cancel_grace_s",
        "must_stop",
        "notice",
        "rent_stages",
        "server_waits",
        "tick_s",
    )

    def __init__(
        self,
        # What an attempt's "nothing can run now" (key refused, no balance) becomes.
        must_stop: Callable[[str, float], Event],
        # Events fed to the core before an attempt's end is: serve's daily spend hold, which
        # must be in place before that end starts the next jobs.
        before_attempt_ends: Callable[[Event, float], Sequence[Event]] = _no_events,
        notice: Callable[[str], None] = _say_nothing,  # a line for the person watching
        # Who hears a rent's stages (renting, booting, connecting) for the job it is meant for.
        rent_stages: Callable[[Job], StageSink] = lambda _job: NO_STAGES,
        tick_s: float = 0.5,  # the longest the loop sleeps before re-reading the clock
        cancel_grace_s: float = CANCEL_GRACE_S,
        # serve: each attempt's facts say whether its server was warm and how long the job
        # waited for one (a run's reports read the wait from the attempt's own times).
        server_waits: bool = False,
    ) -> None:
        self.must_stop = must_stop
        self.before_attempt_ends = before_attempt_ends
        self.notice = notice
        self.rent_stages = rent_stages
        self.tick_s = tick_s
        self.cancel_grace_s = cancel_grace_s
        self.server_waits = server_waits


class _Call:
    """Run `fn(now)` on the loop thread, its answer in `reply`."""

    __slots__ = ("fn", "reply")

    def __init__(self, fn: Callable[[float], Any], reply: Future[Any]) -> None:
        self.fn, self.reply = fn, reply


class _Placed:
    """An attempt holds its place (posted by its worker); the script starts now."""

    __slots__ = ("event", "place")

    def __init__(self, event: AttemptPlaced, place: Place) -> None:
        self.event, self.place = event, place


class _MustStop:
    """A backend said nothing can run now (posted by a worker)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Quit:
    pass


class _FromServer:
    """What an adapter says about a server (posted from any thread)."""

    __slots__ = ("event",)

    def __init__(self, event: ServerEvent) -> None:
        self.event = event


_Posted = (
    Event | _Call | _Placed | _MustStop | _Quit | _FromServer | None
)  # None: re-read the clock


class _Deadline:
    """The run's own timeout: cancels everything (a timer's token, hashed by identity)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _GraceOver:
    """The cancel's grace is over: settle the attempts that have not ended."""


_Token = TimerToken | _Deadline | _GraceOver  # the core's timers and the driver's own


class _Out:
    """An attempt handed to a worker (one per attempt: a plain class, not a dataclass with a
    default factory, whose generated __init__ costs a few calls more)."""

    __slots__ = ("kill", "number", "placed", "started_at")

    def __init__(self, number: int, started_at: float) -> None:
        self.number = number
        self.started_at = started_at
        self.kill = Kill()
        self.placed = False


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
        self._releasing: list[threading.Thread] = []  # servers being given back
        self.backend = backend
        self.runner = runner
        self.journal = journal
        self.clock = clock
        self.options = options
        self._events: queue.SimpleQueue[_Posted] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, _Token]] = []
        self._seq = itertools.count()
        self._jobs: dict[str, Job] = {}  # unsettled jobs (the core forgets them when settled)
        self._out: dict[str, _Out] = {}
        self._pool = _Workers(max(1, core.capacity))
        self._futures: list[_Task] = []
        self._prune_at = 16  # the length at which `_futures` drops the tasks that are over
        # Servers that already exist (SSH hosts, local slots) are let go only after their
        # attempts have stopped: their files are fetched on the way out.
        self._gives_back_early = core.book.renting
        self._places_held = 0
        self._cancel_at: float | None = None
        self._early: threading.Thread | None = None
        # What the give-back could not confirm (a cancel refused, an order never found): the
        # run's reports say it too, and `clore-run cleanup` finishes it.
        self.give_back_warnings: list[str] = []
        self._rents_said: dict[int, str] = {}  # rents under way: the job and host said

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
            self._timer(self.clock.time() + timeout_s, _Deadline(reason))
        while not self.core.idle:
            self.step()

    def quit(self) -> None:
        self._events.put(_Quit())

    def step(self) -> bool:
        """Wait for one event (or the next timer) and handle it; False when told to quit."""
        wait_s = self.options.tick_s
        if self._timers and self._events.empty():  # with an event waiting, get() will not wait
            wait_s = min(wait_s, max(0.0, self._timers[0][0] - self.clock.time()))
        try:
            posted = self._events.get(timeout=wait_s)
        except queue.Empty:
            posted = None
        if isinstance(posted, _Quit):
            return False
        now = self.clock.time()
        if posted is not None:
            self._on(posted, now)
        while self._timers and self._timers[0][0] <= now:
            _, _, token = heapq.heappop(self._timers)
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
        _wait_all(self._futures, grace)
        self._pool.shutdown()

    def give_back(self) -> None:
        """The second half of `close`: every place back (a slow API makes this the slow part)."""
        if self._early is not None:
            self._early.join(timeout=self.options.cancel_grace_s)
        # Releases under way end first (each confirms within a bound of its own): what they
        # cost lands, and the sweep's ledger check after them sees them released. Rents under
        # way are the sweep's: it cancels them and waits for them.
        cancelled = self._cancel_at is not None
        for side in self._releasing:
            side.join(timeout=self.options.cancel_grace_s if cancelled else None)
        self._shutdown_backend()

    # -- events ----------------------------------------------------------------------------

    def _on(self, posted: _Posted, now: float) -> None:
        # The two every attempt posts come first: the types are distinct, so the order of
        # the tests changes nothing but their cost.
        if isinstance(posted, AttemptEnded):
            self._attempt_ended(posted, now)
        elif isinstance(posted, _Placed):
            self._placed(posted.event, posted.place, now)
        elif isinstance(posted, _Call):
            try:
                posted.reply.set_result(posted.fn(now))
            except Exception as exc:
                posted.reply.set_exception(exc)
                raise  # the loop's owner hears of it too: nobody may be waiting for the reply
        elif isinstance(posted, _MustStop):
            self.feed(self.options.must_stop(posted.reason, now), now)
        elif isinstance(posted, _FromServer):
            self._rent_over(posted.event)
            self._apply(self.core.handle(posted.event, now), now)
        elif posted is not None and not isinstance(posted, _Quit):
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

    def _timer(self, at: float, token: _Token) -> None:
        heapq.heappush(self._timers, (at, next(self._seq), token))

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
            self._futures += self._pool.submit(works)
        if self._cancel_at is None and self.core.stop_reason is not None:
            self._stopping(now)

    def _record(self, cmd: CoreCommand, now: float) -> Callable[[], None] | None:
        """Carry one command out; a start answers the work to hand to a worker once the
        journal has recorded the batch."""
        # Dispatched on the command's exact type (the core's commands are final dataclasses):
        # a chain of isinstance tests cost each attempt's settle eight of them.
        record = _RECORD.get(type(cmd))
        return record(self, cmd, now) if record is not None else None

    def _kill(self, cmd: KillAttempt, now: float) -> None:
        out = self._out.get(cmd.job_id)
        if out is not None:
            out.kill.stop(cmd.reason)

    def _set_timer(self, cmd: SetTimer, now: float) -> None:
        self._timer(cmd.at, cmd.token)
        self._say_waiting(cmd)

    def _attempt_recorded(self, cmd: AttemptRecorded, now: float) -> None:
        self.journal.attempt_ended(self._jobs[cmd.job_id], cmd.attempt)

    def _requeued(self, cmd: Requeued, now: float) -> None:
        job = self._jobs[cmd.job_id]
        self.journal.requeued(job, cmd.at, cmd.retries_used, cmd.infra_used)

    def _settled(self, cmd: Settled, now: float) -> None:
        self.journal.settled(self._jobs.pop(cmd.result.job_id), cmd.result, now)

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
        self._timer(now + self.options.cancel_grace_s, _GraceOver())
        if self._gives_back_early:
            self._early = threading.Thread(target=self._shutdown_backend, daemon=True)
            self._early.start()

    def _settle_stragglers(self, now: float) -> None:
        """Attempts that did not stop when told are reported as cancelled; the backend's
        shutdown frees their places."""
        for job_id, out in list(self._out.items()):
            attempt = Attempt(
                out.number, out.started_at, now, None, FailureKind.CANCELLED, "did not stop"
            )
            self._attempt_ended(AttemptEnded(job_id, attempt), now)

    def _shutdown_backend(self) -> None:
        try:
            self.backend.shutdown()
        except CloreRunError as exc:
            # A rental left unconfirmed: said now (once: a cancelled run's give-back runs
            # twice), and kept for the run's reports.
            if str(exc) not in self.give_back_warnings:
                self.give_back_warnings.append(str(exc))
                self.options.notice(f"warning: {exc}")
        except Exception as exc:
            self.options.notice(f"giving places back failed: {type(exc).__name__}: {exc}")

    # -- workers ---------------------------------------------------------------------------

    def _work(
        self,
        job: Job,
        number: int,
        timeout_s: float,
        kill: Kill,
        server: int,
        said: Mapping[str, str],
    ) -> None:
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

    # -- servers the core decides ----------------------------------------------------------

    def _start_on(self, cmd: StartOn, now: float) -> Callable[[], None]:
        """An attempt on the server the core chose: the attempt runner gets it as its place."""
        job = self._jobs[cmd.job_id]
        out = _Out(cmd.attempt, now)
        self._out[job.id] = out
        self.journal.attempt_started(job, cmd.attempt, now)
        if len(self._futures) >= self._prune_at:
            # Pruned when the list has doubled, not at every start: the same memory bound,
            # a fraction of the passes over it.
            self._futures = [f for f in self._futures if not f.done()]
            self._prune_at = 2 * len(self._futures) + 16
        said: dict[str, str] = {}
        if self.options.server_waits:
            said = {WARM_SERVER: "true" if cmd.warm else "false"}
            said[SERVER_WAIT_S] = f"{cmd.waited_s:.3f}"
        return functools.partial(
            self._work, job, cmd.attempt, cmd.timeout_s, out.kill, cmd.server, said
        )

    def _rent(self, cmd: RentServer, now: float) -> None:
        ahead = " ahead of its needs" if cmd.ahead else ""
        if cmd.hedge_of is not None:
            ahead = " as a hedge of a late boot"
        if cmd.warm is not None:
            ahead = " to keep warm for the next job"
        self.options.notice(
            f"{cmd.for_job}: renting {cmd.quote.gpu_model or 'a server'} #{cmd.quote.host}"
            f"{ahead} (${cmd.quote.usd_per_hour:.3f}/h, up to ${cmd.worst_case_usd:.2f})"
        )
        self._rents_said[cmd.server] = f"{cmd.for_job}: #{cmd.quote.host}"
        # Not joined at the end: the backend's shutdown cancels rents under way, and waits.
        # A rent for warmth is for no job: the job it boots as stands in (default image).
        job = cmd.warm if cmd.warm is not None else self._jobs[cmd.for_job]
        self._off_loop([], self._rent_off_loop, cmd, job)

    def _rent_over(self, event: ServerEvent) -> None:
        """A rent said on screen ends: one that came to nothing says so, or its "renting"
        line would stand for a server never held (a rent given up before its create)."""
        if isinstance(event, ServerDeploying):
            return  # on its way: the rent goes on
        said = self._rents_said.pop(event.server, None)
        if said is not None and isinstance(event, RentFailed):
            self.options.notice(f"{said} not rented: {event.reason}")

    def _job_note(self, cmd: JobNote, now: float) -> None:
        self.options.notice(f"{cmd.job_id}: {cmd.text}")

    def _release(self, cmd: ReleaseServer, now: float) -> None:
        """Give a server back off the loop; at the end of a run, or once it is cancelled, the
        backend's shutdown gives back everything left in one sweep instead."""
        if not cmd.rented or self.core.over or self._cancel_at is not None:
            return
        self._releasing = self._off_loop(self._releasing, self._release_off_loop, cmd)

    def _rent_off_loop(self, cmd: RentServer, job: Job) -> None:
        """The rent, on its thread. An adapter that raises still answers: the core would wait
        for that server for ever (its order, if any, the provisioner cancelled on the way out,
        and the ledger keeps it for the shutdown's check)."""
        try:
            # A rent ahead is for a job still waiting for its needs: its row says that, and
            # the notice says the rent; one for a ready job is what that job is doing now.
            ahead = cmd.ahead or cmd.warm is not None
            stages = NO_STAGES if ahead else self.options.rent_stages(job)
            self.backend.rent(cmd, job, self._report, stages)
        except Exception as exc:
            self._report(RentFailed(cmd.server, f"internal error while renting: {exc!r}"))

    def _release_off_loop(self, cmd: ReleaseServer) -> None:
        try:
            self.backend.release_server(cmd.server, cmd.reason, self._report)
        except Exception as exc:  # what is not confirmed released stays in the ledger
            self.options.notice(f"giving server {cmd.server} back failed: {exc!r}")
            self._report(ServerReleased(cmd.server))

    def _off_loop(
        self, threads: list[threading.Thread], fn: Callable[..., None], *args: Any
    ) -> list[threading.Thread]:
        """Start `fn(*args)` on a thread of its own; the live ones of `threads`, and it."""
        thread = threading.Thread(target=fn, args=args, daemon=True)
        thread.start()
        return [*(t for t in threads if t.is_alive()), thread]

    def _report(self, event: ServerEvent) -> None:
        """What an adapter says about a server, from any thread."""
        self._events.put(_FromServer(event))


# How `_record` carries out each kind of command.
_RECORD: dict[type[Any], Callable[[Driver, Any, float], Callable[[], None] | None]] = {
    StartOn: Driver._start_on,
    RentServer: Driver._rent,
    JobNote: Driver._job_note,
    ReleaseServer: Driver._release,
    KillAttempt: Driver._kill,
    SetTimer: Driver._set_timer,
    AttemptRecorded: Driver._attempt_recorded,
    Requeued: Driver._requeued,
    Settled: Driver._settled,
}


class _Task:
    """A call handed to the workers, and whether it is over (ran, or cancelled unstarted).

    Not a Future: nobody reads an answer or an exception of these (the attempt runner reports
    through the event queue). Over is a plain lock held from the start and released once, a
    C object: a Future or an Event builds a Condition in Python, ~8 us more per attempt."""

    __slots__ = ("_open", "call", "cancelled")

    def __init__(self, call: Callable[[], None]) -> None:
        self.call = call
        self.cancelled = False
        self._open = threading.Lock()
        self._open.acquire()

    def end(self) -> None:
        """Once, by the worker that ran it or by the shutdown that cancelled it."""
        self._open.release()

    def done(self) -> bool:
        return not self._open.locked()

    def wait(self, timeout_s: float) -> bool:
        """True once it is over; False when `timeout_s` passed first."""
        if not self._open.acquire(timeout=timeout_s):
            return False
        self._open.release()  # over stays over for the next one to ask
        return True


def _wait_all(tasks: Sequence[_Task], timeout_s: float) -> None:
    """Until every task is over or `timeout_s` have passed, whichever comes first: real
    seconds, as the threads' waits are (a test's fake clock does not move them)."""
    until = time.monotonic() + timeout_s
    for task in tasks:
        left = until - time.monotonic()
        if left <= 0 or not task.wait(left):
            return


class _Workers:
    """At most `size` daemon threads running the submitted calls, a `_Task` for each.

    Not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so an attempt
    stuck in a backend that ignores its cancel would keep clore-run from exiting after the run
    had already settled it and written its reports."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)

    def submit(self, calls: Sequence[Callable[[], None]]) -> list[_Task]:
        """Called from one thread only (the loop)."""
        tasks = [_Task(call) for call in calls]
        for _ in tasks:
            # Idle threads are counted only until all `size` exist: a Semaphore's acquire
            # and release are Python code around a Condition, microseconds per attempt.
            if len(self._threads) >= self._size:
                break
            if not self._idle.acquire(blocking=False):
                name = f"job_{len(self._threads)}"
                thread = threading.Thread(target=self._serve, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
        # Queued once the threads they need have started: `start` waits for the new thread
        # to run, and one that found a task would run it first, holding the interpreter lock
        # while the loop waited to start the next (the first batch's starts took 6 ms).
        for task in tasks:
            self._tasks.put(task)
        return tasks

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                if not task.cancelled:
                    task.call()
            except BaseException:  # as a pool's worker does: it lives on for the next call
                pass
            finally:
                task.end()
            if len(self._threads) < self._size:  # once all exist, `submit` counts no more
                self._idle.release()

    def shutdown(self) -> None:
        """Cancel what has not started; idle threads end, busy ones when their call returns."""
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.cancelled = True
                task.end()
        for _ in self._threads:
            self._tasks.put(None)
