"""The queue: what only `serve` has, around the one driver and its scheduling core.

API threads write submissions to the store (durable before the reply) and hand them to the
driver's loop; only the loop thread touches the core, and the store is its journal, so the two
never disagree. What is its own here: the daily spend hold, recovery after a restart, and the
hand-over of running jobs at shutdown. Timers run on the injected clock; a fake clock is moved
by a test, which then calls `wake()`.

On a backend whose servers the core decides (clore), the core is an ongoing `PlacingCore`: it
rents, reuses and gives back servers for jobs as they arrive, within the cap and a budget of
the daily spend limit that it reserves each rental's worst case against. The spend hold stays
beside it. Both are this instance's own, so `serve` refuses the limit on a shared queue (N
instances would commit N times it): there a per-day budget pool is the day's budget they share.

Start-up recovers what the last server left: attempts whose rows were never completed were
interrupted. The backend is reconciled first (local orphans killed, clore rentals cancelled per
the ledger), then each attempt is recorded as `server_lost` with what was done, and the job is
requeued by the retry table, never silently run again.

On a shared store (PostgreSQL, N instances) nothing is loaded at start: jobs come into this
instance's core by claims, and a dead instance's running jobs by a take-over that recovers them
the same way (runner/serve/fleet.py). Submissions and cancels of jobs held elsewhere go through
the store, so any instance answers any request.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import functools
import logging
import math
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from runner.backends.base import Backend, HandsOver, Place, RentingBackend
from runner.backends.local_orphans import ENV_NAME
from runner.backends.spec import Reconcile
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.events import AttemptEnded, CancelJob, Event, HoldStarts
from runner.core.model import Attempt, FailureKind, Job, JobResult
from runner.core.outcome import NeedOutcome, need_outcome
from runner.core.placing import PlacingCore
from runner.core.retry import backoff_s
from runner.core.scheduler import OUT, Entry, Phase
from runner.core.warm_policy import COLD, WarmPolicy
from runner.engine.attempt import AttemptRunner
from runner.engine.driver import Driver, DriverOptions
from runner.engine.server_book import book_for
from runner.errors import InfrastructureError
from runner.serve import views
from runner.serve.fleet import (
    FencedJournal,
    Fleet,
    FleetOptions,
    log_elsewhere,
    waiting_elsewhere,
)
from runner.serve.idle_kept import FLUSH_S, IdleKept
from runner.serve.kept_journal import KeptJournal
from runner.serve.quiet_console import QuietConsole
from runner.serve.submit import Prepared, check_known, with_server_ids
from runner.serve.warm_flags import check_on_market
from runner.stores.queue import OpenAttempt, QueueError, QueueStore, Unsettled, shared

log = logging.getLogger("clore_run.serve")

T = TypeVar("T")

SHUTDOWN_GRACE_S = 5.0  # running attempts get this long to stop and report at shutdown
REPLY_TIMEOUT_S = 10.0  # an API call waiting on the loop gives up (503) after this
MUST_STOP_HOLD_S = 60.0  # the backend said nothing can run (key refused): pause starts
MAX_WAIT_S = 3600.0  # the loop re-reads the clock at least this often (a far timer would overflow)


@dataclass
class ServiceOptions:
    data_dir: Path
    capacity: int
    daily_spend_limit_usd: float | None = None
    backoff: Callable[[int], float] = backoff_s
    reconcile: Reconcile = lambda tokens: "nothing was left to stop"
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    fleet: FleetOptions = field(default_factory=FleetOptions)  # a shared (PostgreSQL) store
    on_lease_lost: Callable[[str], None] = lambda why: None  # the server must end
    journal_retry_s: float = 5.0  # writes the store refused are tried again this often
    warmth: WarmPolicy = COLD  # what the core keeps warm (--keep-warm, --warm, --idle-budget)
    idle_wake_s: float = FLUSH_S  # the loop looks at idle money at least this often (real time)


@dataclass(frozen=True)
class Submitted:
    ids: tuple[str, ...]
    warnings: tuple[str, ...]


class LoopNotRunning(Exception):
    """The scheduling loop did not answer in time (stopped, or stuck)."""


class StoreJournal:
    """The queue's journal: every attempt and settlement goes to the store, as it happens."""

    def __init__(self, store: QueueStore, instance: str) -> None:
        self.store = store
        self.instance = instance

    def batch(self) -> AbstractContextManager[None]:
        return self.store.batch()

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        self.store.start_attempt(job.id, number, self.instance, now)
        log.info("job %s started (attempt %d)", job.id, number)

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        """Where a running job runs and at what price, shown while it runs."""
        self.store.place_attempt(job.id, number, place.name, place.facts, place.usd_per_hour)

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        self.store.end_attempt(job.id, attempt)

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        self.store.requeue(job.id, at, retries_used, infra_used)

    def waits_until(self, job: Job, at: float) -> None:
        return None  # the job's spec has its not-before; the scheduler says why it waits

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.store.settle(result, now)
        log.info("job %s %s %s", job.id, result.status.value, result.reason)


class Service:
    """The queue: submit and cancel from any thread; `start()` and `stop()` once each."""

    def __init__(
        self,
        store: QueueStore,
        backend: Backend,
        options: ServiceOptions,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.backend = backend
        if isinstance(backend, HandsOver):  # every job carries the instance's token (below)
            backend.handover_mark = f"{ENV_NAME}={options.instance}"
        self.options = options
        self.clock = clock
        runner = AttemptRunner(
            backend,
            options.data_dir,
            clock,
            QuietConsole(),
            {ENV_NAME: options.instance},  # no workspace: a queue's jobs start in empty folders
        )
        self.shared = shared(store)  # other instances work on it: claim jobs, hold a lease
        self.fleet: Fleet | None = None
        # A refused write is kept and retried, never raised into the loop (a full disk, a
        # database restart). On a shared store every write is fenced by this instance's token.
        inner: StoreJournal | FencedJournal = StoreJournal(store, options.instance)
        if self.shared is not None:
            self.fleet = Fleet(
                self.shared, options.instance, self, options.fleet, options.on_lease_lost
            )
            inner = FencedJournal(self.shared, options.instance, self.fleet.nudge)
        self.journal = KeptJournal(inner, self._unrecorded_start, on_kept=self._retry_later)
        self._retry_timer: threading.Timer | None = None  # loop thread only
        journal = self.journal
        self.placing = self._placing_core()
        self.idle = IdleKept(store, options.instance)  # idle money kept across restarts
        self._idle_timer: threading.Timer | None = None
        self._stopping = threading.Event()
        self.driver: Driver = Driver(
            self.placing,
            backend,
            runner,
            journal,
            clock,
            DriverOptions(
                must_stop=self._must_stop,
                before_attempt_ends=self._spend_before_end,
                notice=log.warning,
                tick_s=MAX_WAIT_S,
                server_waits=True,
            ),
        )
        self._submit_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="serve-loop", daemon=True)
        self.held_until: float | None = None  # the daily spend limit holds starts until then

    def _placing_core(self) -> PlacingCore:
        """The core with servers, for jobs that come over time: rented ones (clore), or the
        backend's hosts or slots."""
        cap = self.options.capacity
        book = book_for(self.backend, (), cap, self.clock.time())
        check_on_market(self.options.warmth, book, self.backend.name)
        book.warmth = self.options.warmth
        return PlacingCore(
            (), book, backoff=self.options.backoff, ongoing=True, on_fatal=self._must_stop
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        now = self.clock.time()
        limit = self.options.daily_spend_limit_usd
        if limit is not None:  # before the loop runs
            self.placing.book.budget_per_day(limit, self.spent_today(now), now)
        self.idle.seed(self.placing.book.idle_money(), now)  # counts toward --idle-budget
        if self.shared is not None and self.fleet is not None:
            ttl_s = self.options.fleet.ttl_s
            self.shared.join(self.options.instance, os.getpid(), self.backend.name, now, ttl_s)
            self._thread.start()  # its jobs come from claims and take-overs, not a reload
            self.fleet.start()
            self._wake_for_idle()
            return
        self.store.begin_instance(self.options.instance, os.getpid(), self.backend.name, now)
        self._recover(now)
        self._thread.start()
        self._wake_for_idle()

    def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Kill what runs, hand it to the next start as queued, give every place back."""
        self._stopping.set()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self.fleet is not None:
            self.fleet.stop()  # claims nothing more while it hands over
        if self._thread.is_alive():
            self.driver.quit()
            self._thread.join()
            self._keep_idle(force=True)  # the stretches going on, to now: servers go back
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        self._hand_over(grace_s)
        self.driver.close()
        try:
            self.store.end_instance(self.options.instance, self.clock.time())
        except QueueError as exc:  # its open attempts tell the next start what was left
            log.error("%s", exc)

    def wake(self) -> None:
        """Re-read the clock now (after a test moved a fake one)."""
        self.driver.post(None)

    # -- called from API threads -----------------------------------------------------------

    def submit(self, prepared: Prepared, kind: str) -> Submitted:
        """Store a submission and queue it. Raises SubmissionError for an unknown need."""
        # The lock keeps the loop's events in commit order: a submission needing another
        # one's jobs is always added after them.
        if self.fleet is not None:  # whichever instance has room claims them
            return self._submit_shared(prepared, kind, self.fleet)
        with self._submit_lock:
            stored = self._store(prepared, kind)
            entries = tuple(Entry(job, seq) for seq, job in stored)
            self.driver.call(lambda now: self._add(entries, now))
        return Submitted(tuple(e.job.id for e in entries), prepared.warnings)

    def _store(self, prepared: Prepared, kind: str) -> list[tuple[int, Job]]:
        """The submission in the store, once every job it needs from earlier ones is known
        (SubmissionError otherwise); its jobs' server ids carry its number."""
        check_known(prepared, self.store.known(list(prepared.external)))
        return self.store.submit(
            kind,
            prepared.label,
            lambda number: with_server_ids(prepared.jobs, number),
            self.clock.time(),
        )

    def cancel(self, job_id: str) -> str:
        """'cancelled', 'cancelling' (it was running: killed), 'unknown', or 'final:<status>'."""
        outcome = self._ask(lambda now: self._cancel(job_id, now))
        if outcome == "elsewhere" and self.shared is not None:
            return self.shared.cancel_elsewhere(job_id, self.clock.time())
        return outcome

    def waiting_for(self, job_id: str) -> str | None:
        """Why a queued job does not run yet, from the scheduler's own state (None: it runs,
        or it is settled)."""
        return self._ask(lambda now: self._why_waiting(job_id, now))

    def waiting_for_many(self, job_ids: list[str]) -> dict[str, str | None]:
        """`waiting_for` of each queued job of a page, in one question to the loop."""
        if not job_ids:
            return {}
        return self._ask(lambda now: {i: self._why_waiting(i, now) for i in job_ids})

    def now(self) -> float:
        return self.clock.time()

    def log_elsewhere(self, job_id: str, path: Path) -> str | None:
        """Where the job's log is, if another instance of a shared queue has it."""
        if self.shared is None or path.exists():
            return None
        return log_elsewhere(self.shared, self.options.instance, job_id)

    def idle_rows(self) -> list[tuple[str, str, float, float]]:
        """Idle money, (YYYY-MM-DD, GPU model, USD, seconds), oldest first: what rented
        servers cost while they ran no job, the stretches going on included."""
        figures = self._ask(self.placing.book.idle_figures)
        rows = self.idle.rows(figures, self.clock.time())
        return [(_date(day), gpu, usd, seconds) for day, gpu, usd, seconds in rows]

    @property
    def servers_held(self) -> int:
        """What the core's book holds: rented servers booting, idle or busy (each is billed),
        and servers that already exist while a job runs on them."""
        return self.placing.book.in_use

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _ask(self, fn: Callable[[float], T]) -> T:
        try:
            return self.driver.call(fn).result(timeout=REPLY_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise LoopNotRunning("the scheduling loop did not answer") from None

    # -- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        self._check_spend(self.clock.time())
        while True:
            try:
                if not self.driver.step():
                    return
                self._keep_idle()
            except Exception:  # a store error must not end the loop: log it, go on
                log.exception("clore-run serve: scheduling loop error")

    def _wake_for_idle(self) -> None:
        """The loop looks at idle money at least every FLUSH_S (it may sleep for an hour when
        nothing happens): an idle stretch going on is written all the same, so a kill -9
        loses at most that much of it. Only where servers are rented."""
        if self._stopping.is_set() or not isinstance(self.backend, RentingBackend):
            return
        self.driver.post(None)
        self._idle_timer = threading.Timer(self.options.idle_wake_s, self._wake_for_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _keep_idle(self, force: bool = False) -> None:
        """Idle money into the store when a write is due (loop thread, or after it ended)."""
        book, now = self.placing.book, self.clock.time()
        if force or self.idle.due(book.idle_money(), now):
            self.idle.flush(book.idle_money(), book.idle_figures(now), now)

    def _add(self, entries: Iterable[Entry], now: float) -> None:
        entries = tuple(entries)
        core = self.driver.core
        inside = {e.job.id for e in entries}
        outside = [n for e in entries for n in e.job.needs if n not in inside and n not in core]
        settled: dict[str, NeedOutcome] = {
            job_id: need_outcome(job, result)
            for job_id, (job, result) in self.store.settled(outside).items()
        }
        self.driver.add(entries, settled, now)

    def _cancel(self, job_id: str, now: float) -> str:
        state = self.driver.core.state(job_id)
        if state is None and self.shared is not None:
            return "elsewhere"  # not this instance's: the store settles it or asks its owner
        if state is None:
            found = self.store.job(job_id)
            return "unknown" if found is None else f"final:{found[0].status}"
        self.driver.feed(CancelJob(job_id, "cancelled by request"), now)
        # A job the core still finds a server for has nothing to kill: it ends at once.
        out = state.phase is Phase.RUNNING or (state.phase is Phase.PLACING and not state.server)
        return "cancelling" if out else "cancelled"

    def _why_waiting(self, job_id: str, now: float) -> str | None:
        core = self.driver.core
        state = core.state(job_id)
        if state is None and self.shared is not None:
            return waiting_elsewhere(self.shared, job_id, now)
        if state is None or (state.phase in OUT and state.server is None):
            return None
        need = core.state(state.needs[0]) if state.needs else None
        need_out = need is not None and need.phase in OUT
        return views.waiting_for(state, need_out, now, self.held_until)

    def _retry_later(self) -> None:
        """The store refused writes (a full disk): try them again on a timer, so the queue
        catches up once it writes again, with or without new work. Loop thread."""
        if self._retry_timer is None or not self._retry_timer.is_alive():
            self._retry_timer = threading.Timer(
                self.options.journal_retry_s, self.driver.call, (self._retry_kept,)
            )
            self._retry_timer.daemon = True
            self._retry_timer.start()

    def _retry_kept(self, _now: float) -> None:
        self._retry_timer = None
        self.journal.retry()  # refused again: it asks for the next timer

    def _unrecorded_start(self, job_id: str, number: int, why: str) -> None:
        # An attempt the store does not know of would be lost to recovery after a crash:
        # it ends before it begins, as an infrastructure failure, and the retry table decides.
        self.driver.stop_attempt(job_id, number, FailureKind.PROVISIONING_FAILED, why)

    @property
    def store_failure(self) -> str | None:
        """Why the store refuses the loop's writes now (None: it writes)."""
        return self.journal.failure

    def _must_stop(self, reason: str, now: float) -> Event:
        log.warning("%s; starting nothing for %g s", reason, MUST_STOP_HOLD_S)
        return HoldStarts(now + MUST_STOP_HOLD_S)

    # -- spend -----------------------------------------------------------------------------

    def spent_today(self, now: float | None = None) -> float:
        return self.store.spend_since(_day_start(self.clock.time() if now is None else now))

    def _spend_before_end(self, event: Event, now: float) -> Sequence[Event]:
        """An attempt's cost is in the store only once its end is recorded: counted here, so a
        hold is in place before the same end starts the next jobs."""
        assert isinstance(event, AttemptEnded)
        hold = self._spend_hold(now, event.attempt.cost_usd)
        return (hold,) if hold is not None else ()

    def _check_spend(self, now: float) -> None:
        hold = self._spend_hold(now)
        if hold is not None:
            self.driver.feed(hold, now)

    def _spend_hold(self, now: float, unrecorded_usd: float = 0.0) -> HoldStarts | None:
        """Past the daily limit, hold starts until the next UTC day. Checked before each
        start can happen; jobs already running go on (their timeouts bound what they add)."""
        limit = self.options.daily_spend_limit_usd
        if limit is None or self.spent_today(now) + unrecorded_usd < limit:
            return None
        until = _day_start(now) + 86_400
        if self.held_until == until:
            return None
        log.warning("daily spend limit $%.2f reached: starting nothing until 00:00 UTC", limit)
        self.held_until = until
        return HoldStarts(until)

    # -- recovery and hand-over ------------------------------------------------------------

    def _recover(self, now: float) -> None:
        unsettled = self.store.unsettled()
        open_rows = {a.job_id: a for a in self.store.open_attempts()}
        dead = {a.instance for a in open_rows.values()}
        # A server that died with no job running may still have held rentals (kept warm, or
        # rented for warmth): those are cancelled through the ledger too, never adopted. What
        # its last job left on them and whose domain they were is not known any more.
        dead.update(self.store.stale_instances(self.options.instance))
        note = self.options.reconcile(dead) if dead else ""
        self._check_spend(now)  # before the jobs are added: adding starts what it can
        self._add([_entry(u) for u in unsettled], now)
        self._feed_lost(unsettled, open_rows, note, now)

    def _feed_lost(
        self, unsettled: Sequence[Unsettled], open_rows: dict[str, OpenAttempt], note: str,
        now: float,
    ) -> None:  # fmt: skip
        """Each running job's attempt ends `server_lost` (unless its end was recorded): the
        retry table decides whether it runs again."""
        for u in unsettled:
            if u.row.status == "running":
                began = open_rows[u.row.id].started_at if u.row.id in open_rows else now
                attempt = self.store.ended_attempt(u.row.id, u.row.attempts) or _lost(
                    u.row.attempts, began, now, note
                )
                log.warning("job %s: attempt %d %s", u.row.id, attempt.number, attempt.message)
                self.driver.feed(AttemptEnded(u.row.id, attempt), now)

    # -- one instance among N on a shared store (the fleet thread calls these) ------------

    def _submit_shared(self, prepared: Prepared, kind: str, fleet: Fleet) -> Submitted:
        stored = self._store(prepared, kind)
        fleet.nudge()
        return Submitted(tuple(job.id for _, job in stored), prepared.warnings)

    def room(self) -> int:
        """How many more jobs this instance's core takes: none while starts are held."""

        def free(now: float) -> int:
            if self.held_until is not None and now < self.held_until:
                return 0
            return self.options.capacity - len(self.driver.core)

        return self._ask(free)

    def add_claimed(self, claimed: list[Unsettled]) -> None:
        self._ask(lambda now: self._add([_entry(u) for u in claimed], now))

    def recover(
        self, token: str, running: list[Unsettled], open_attempts: dict[str, OpenAttempt]
    ) -> None:
        """A dead instance's running jobs, now this one's: its backend reconciled first (its
        processes killed, its rentals cancelled), then as a restart recovers them."""
        note = self.options.reconcile({token})

        def take(now: float) -> None:
            self._add([_entry(u) for u in running], now)
            self._feed_lost(running, open_attempts, note, now)

        self._ask(take)

    def cancel_held(self, job_id: str) -> None:
        self._ask(lambda now: self._cancel(job_id, now))

    def _hand_over(self, grace_s: float) -> None:
        """At shutdown: kill running attempts; those that report in time go back to `queued`
        with the attempt recorded; the others stay open for the next start to reconcile. A job
        the core was killing already (cancelled, timed out) ends as the core decides instead:
        handed over, a cancelled job would run again."""
        now = self.clock.time()
        dying = self.driver.killed_jobs()
        self.driver.feed(HoldStarts(math.inf), now)  # those ends must start nothing
        for event in self.driver.drain_attempts(grace_s):
            if event.job_id in dying:
                self.driver.feed(event, self.clock.time())
            else:
                message = "interrupted: the queue server shut down"
                self._requeue_ended(event.job_id, _with_message(event.attempt, message))

    def _requeue_ended(self, job_id: str, attempt: Attempt) -> None:
        if self.shared is None:
            write = functools.partial(self.store.end_attempt, job_id, attempt, requeue=True)
            self.journal.write(write)  # kept, not raised, when the disk is full
            return
        try:  # fenced: if another instance took the job already, it is that one's
            self.shared.fenced_end_attempt(job_id, attempt, self.options.instance, requeue=True)
        except InfrastructureError as exc:
            log.warning("job %s: not handed over: %s", job_id, exc)


def _entry(u: Unsettled) -> Entry:
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


def _date(day: int) -> str:
    return dt.datetime.fromtimestamp(day * 86_400, dt.timezone.utc).strftime("%Y-%m-%d")


def _day_start(now: float) -> float:
    """Midnight UTC at or before `now`: the daily limit counts calendar days in UTC."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()
