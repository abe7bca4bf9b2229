"""The queue's imperative shell: one scheduling loop feeding the pure QueueCore.

API threads write submissions to the store (durable before the reply) and post events; only the
loop thread touches the core and writes job states, so the store and the core never disagree.
Timers (timeouts, not-before, retry backoff, the spend hold) live here, on the injected clock;
a fake clock is moved by a test, which then calls `wake()`.

Start-up recovers what the last server left: attempts whose rows were never completed were
interrupted. The backend is reconciled first (local orphans killed, clore rentals cancelled per
the ledger), then each attempt is recorded as `server_lost` with what was done, and the job is
requeued by the retry table, never silently run again.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import heapq
import io
import itertools
import logging
import math
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from runner.attempt import AttemptRunner
from runner.backends.base import Backend, RentingBackend
from runner.core.events import (
    JobCompleted,
    JobFinished,
    KillJob,
    ScheduleTimer,
    StartJob,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job
from runner.core.retry import backoff_s
from runner.serve.core import (
    AttemptEnded,
    CancelJob,
    Entry,
    NeedOutcome,
    QueueCommand,
    QueueCore,
    Requeued,
    outcome_of,
)
from runner.serve.orphans import ENV_NAME
from runner.serve.quiet_console import QuietConsole
from runner.serve.store import Store, Unsettled
from runner.serve.submit import Prepared, check_known, with_server_ids

log = logging.getLogger("clore_run.serve")

SHUTDOWN_GRACE_S = 5.0  # running attempts get this long to stop and report at shutdown
REPLY_TIMEOUT_S = 10.0  # an API call waiting on the loop gives up (503) after this
MUST_STOP_HOLD_S = 60.0  # the backend said nothing can run (key refused): pause starts
MAX_WAIT_S = 3600.0  # the loop re-reads the clock at least this often (a far timer would overflow)

# Called once at start with the tokens of dead instances that left attempts open; answers a
# note for the lost attempts ("its processes were killed at restart").
Reconcile = Callable[[set[str]], str]


@dataclass
class ServiceOptions:
    data_dir: Path
    capacity: int
    daily_spend_limit_usd: float | None = None
    backoff: Callable[[int], float] = backoff_s
    reconcile: Reconcile = lambda tokens: "nothing was left to stop"
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclass(frozen=True)
class Submitted:
    ids: tuple[str, ...]
    warnings: tuple[str, ...]


class LoopNotRunning(Exception):
    """The scheduling loop did not answer in time (stopped, or stuck)."""


@dataclass(frozen=True)
class _Added:
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class _Cancel:
    job_id: str
    reply: Future[str]


@dataclass(frozen=True)
class _MustStop:
    reason: str


class _Stop:
    pass


_Event = _Added | _Cancel | _MustStop | _Stop | JobFinished | None


class Service:
    """The queue: submit and cancel from any thread; `start()` and `stop()` once each."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        options: ServiceOptions,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.backend = backend
        self.options = options
        self.clock = clock
        self.core = QueueCore(options.capacity, options.backoff)
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._kills: dict[str, threading.Event] = {}
        self._running: dict[str, tuple[int, float]] = {}  # job -> (attempt, started at)
        self._submit_lock = threading.Lock()
        self._held = 0
        self._held_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(options.capacity, thread_name_prefix="serve-job")
        self._worker = AttemptRunner(
            backend,
            options.data_dir,
            clock,
            QuietConsole(io.StringIO(), live=False),
            {ENV_NAME: options.instance},  # no workspace: a queue's jobs start in empty folders
            on_placed=lambda _job, _number: self._count_held(1),
            on_released=lambda: self._count_held(-1),
            on_server=lambda job, number, place: store.place_attempt(
                job.id, number, place.name, place.facts, place.usd_per_hour
            ),
        )
        self._thread = threading.Thread(target=self._loop, name="serve-loop", daemon=True)
        self._stopping = False
        self.held_until: float | None = None  # the daily spend limit holds starts until then

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        now = self.clock()
        self.store.begin_instance(self.options.instance, os.getpid(), self.backend.name, now)
        self._recover(now)
        self._thread.start()

    def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Kill what runs, hand it to the next start as queued, give every place back."""
        if self._thread.is_alive():
            self._events.put(_Stop())
            self._thread.join()
        self._hand_over(grace_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.backend.shutdown()
        self.store.end_instance(self.options.instance, self.clock())

    def wake(self) -> None:
        """Re-read the clock now (after a test moved a fake one)."""
        self._events.put(None)

    # -- called from API threads -----------------------------------------------------------

    def submit(self, prepared: Prepared, kind: str) -> Submitted:
        """Store a submission and queue it. Raises SubmissionError for an unknown need."""
        # The lock keeps the loop's events in commit order: a submission needing another
        # one's jobs is always added after them.
        with self._submit_lock:
            check_known(prepared, self.store.known(list(prepared.external)))
            stored = self.store.submit(
                kind,
                prepared.label,
                lambda number: with_server_ids(prepared.jobs, number),
                self.clock(),
            )
            entries = tuple(Entry(job, seq) for seq, job in stored)
            self._events.put(_Added(entries))
        return Submitted(tuple(e.job.id for e in entries), prepared.warnings)

    def cancel(self, job_id: str) -> str:
        """'cancelled', 'cancelling' (it was running: killed), 'unknown', or 'final:<status>'."""
        reply: Future[str] = Future()
        self._events.put(_Cancel(job_id, reply))
        try:
            return reply.result(timeout=REPLY_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise LoopNotRunning("the scheduling loop did not answer") from None

    @property
    def servers_held(self) -> int:
        with self._held_lock:
            return self._held

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        self._check_spend(self.clock())
        while True:
            now = self.clock()
            wait = min(MAX_WAIT_S, max(0.0, self._timers[0][0] - now)) if self._timers else None
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                event = None
            if isinstance(event, _Stop):
                return
            try:
                self._on(event, self.clock())
            except Exception:  # a store error must not end the loop: log it, go on
                log.exception("clore-run serve: scheduling loop error")

    def _on(self, event: _Event, now: float) -> None:
        if isinstance(event, _Added):
            self._add(event.entries, now)
        elif isinstance(event, JobFinished):
            self._running.pop(event.job_id, None)
            self._kills.pop(event.job_id, None)
            # Before the core hears of it: the same call starts the next jobs.
            self._check_spend(now, event.attempt.cost_usd)
            self._apply(self.core.handle(event, now), now)
        elif isinstance(event, _Cancel):
            event.reply.set_result(self._cancel(event.job_id, now))
        elif isinstance(event, _MustStop):
            log.warning("%s; starting nothing for %g s", event.reason, MUST_STOP_HOLD_S)
            self._apply(self.core.hold(now + MUST_STOP_HOLD_S, now), now)
        while self._timers and self._timers[0][0] <= now:
            _, _, token = heapq.heappop(self._timers)
            self._apply(self.core.handle(TimerFired(token), now), now)

    def _add(self, entries: Iterable[Entry], now: float) -> None:
        entries = tuple(entries)
        inside = {e.job.id for e in entries}
        outside = [
            n for e in entries for n in e.job.needs if n not in inside and n not in self.core
        ]
        settled: dict[str, NeedOutcome] = {
            job_id: outcome_of(job, status, reason)
            for job_id, (job, status, reason) in self.store.settled(outside).items()
        }
        self._apply(self.core.add(entries, settled, now), now)

    def _cancel(self, job_id: str, now: float) -> str:
        state = self.core.state(job_id)
        if state is None:
            found = self.store.job(job_id)
            return "unknown" if found is None else f"final:{found[0].status}"
        self._apply(self.core.handle(CancelJob(job_id, "cancelled by request"), now), now)
        return "cancelling" if state == "running" else "cancelled"

    def _apply(self, commands: list[QueueCommand], now: float) -> None:
        for cmd in commands:
            if isinstance(cmd, StartJob):
                self._start(cmd, now)
            elif isinstance(cmd, KillJob):
                kill = self._kills.get(cmd.job_id)
                if kill is not None:
                    kill.set()
            elif isinstance(cmd, ScheduleTimer):
                heapq.heappush(self._timers, (cmd.at, next(self._seq), cmd.token))
            elif isinstance(cmd, AttemptEnded):
                self.store.end_attempt(cmd.job_id, cmd.attempt)
            elif isinstance(cmd, Requeued):
                self.store.requeue(cmd.job_id, cmd.at, cmd.retries_used, cmd.infra_used)
            elif isinstance(cmd, JobCompleted):
                result = cmd.result
                self.store.settle(result.job_id, result.status, result.reason, now)
                log.info("job %s %s %s", result.job_id, result.status.value, result.reason)
        if commands and isinstance(self.backend, RentingBackend):
            # Servers no queued job can use are given back at once.
            self.backend.set_pending(self.core.unsettled_jobs())

    def _start(self, cmd: StartJob, now: float) -> None:
        self.store.start_attempt(cmd.job_id, cmd.attempt, self.options.instance, now)
        job = self.core.job(cmd.job_id)
        kill = threading.Event()
        self._kills[cmd.job_id] = kill
        self._running[cmd.job_id] = (cmd.attempt, now)
        log.info("job %s started (attempt %d)", cmd.job_id, cmd.attempt)
        self._pool.submit(self._work, job, cmd.attempt, cmd.timeout_s, kill)

    def _work(self, job: Job, number: int, timeout_s: float, kill: threading.Event) -> None:
        ran = self._worker.run(job, number, timeout_s, kill)  # never raises
        self._events.put(JobFinished(job.id, ran.attempt))
        if ran.stop_reason:
            self._events.put(_MustStop(ran.stop_reason))

    def _count_held(self, delta: int) -> None:
        with self._held_lock:
            self._held += delta

    # -- spend -----------------------------------------------------------------------------

    def spent_today(self, now: float | None = None) -> float:
        return self.store.spend_since(_day_start(self.clock() if now is None else now))

    def _check_spend(self, now: float, unrecorded_usd: float = 0.0) -> None:
        """Past the daily limit, hold starts until the next UTC day. Checked before each
        start can happen; jobs already running go on (their timeouts bound what they add)."""
        limit = self.options.daily_spend_limit_usd
        if limit is None or self.spent_today(now) + unrecorded_usd < limit:
            return
        until = _day_start(now) + 86_400
        if self.held_until != until:
            log.warning("daily spend limit $%.2f reached: starting nothing until 00:00 UTC", limit)
            self.held_until = until
            self._apply(self.core.hold(until, now), now)

    # -- recovery and hand-over ------------------------------------------------------------

    def _recover(self, now: float) -> None:
        unsettled = self.store.unsettled()
        open_rows = {a.job_id: a for a in self.store.open_attempts()}
        dead = {a.instance for a in open_rows.values()}
        note = self.options.reconcile(dead) if dead else ""
        self._check_spend(now)  # before the jobs are added: adding starts what it can
        entries = [self._entry(u) for u in unsettled]
        self._add(entries, now)
        for u in unsettled:
            if u.row.status == "running":
                began = open_rows[u.row.id].started_at if u.row.id in open_rows else now
                attempt = self.store.ended_attempt(u.row.id, u.row.attempts) or _lost(
                    u.row.attempts, began, now, note
                )
                log.warning("job %s: attempt %d %s", u.row.id, attempt.number, attempt.message)
                self._apply(self.core.handle(JobFinished(u.row.id, attempt), now), now)

    def _entry(self, u: Unsettled) -> Entry:
        row = u.row
        return Entry(
            u.job,
            row.seq,
            attempts=row.attempts,
            retries_used=row.retries_used,
            infra_used=row.infra_used,
            wake_at=row.retry_at,
            running=row.status == "running",
        )

    def _hand_over(self, grace_s: float) -> None:
        """At shutdown: kill running attempts; those that report in time go back to `queued`
        with the attempt recorded; the others stay open for the next start to reconcile. A job
        the core was killing already (cancelled, timed out) ends as the core decides instead:
        handed over, a cancelled job would run again."""
        now = self.clock()
        dying = {job_id for job_id, kill in self._kills.items() if kill.is_set()}
        self._apply(self.core.hold(math.inf, now), now)  # those ends must start nothing
        for kill in self._kills.values():
            kill.set()
        deadline = time.monotonic() + grace_s
        while self._running and time.monotonic() < deadline:
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if isinstance(event, JobFinished) and event.job_id in self._running:
                del self._running[event.job_id]
                if event.job_id in dying:
                    ended = self.clock()
                    self._apply(self.core.handle(event, ended), ended)
                else:
                    message = "interrupted: the queue server shut down"
                    self.store.end_attempt(
                        event.job_id, _with_message(event.attempt, message), requeue=True
                    )


def _lost(number: int, began: float, now: float, note: str) -> Attempt:
    return Attempt(
        number,
        began,
        now,
        None,
        FailureKind.SERVER_LOST,
        f"lost: the queue server stopped while it ran; {note}",
    )


def _with_message(attempt: Attempt, message: str) -> Attempt:
    return Attempt(
        attempt.number, attempt.started_at, attempt.finished_at, attempt.exit_code,
        FailureKind.SERVER_LOST, message, attempt.server, attempt.cost_usd, attempt.facts,
    )  # fmt: skip


def _day_start(now: float) -> float:
    """Midnight UTC at or before `now`: the daily limit counts calendar days in UTC."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()
