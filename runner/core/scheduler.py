"""Event-driven list scheduling of jobs under one concurrency cap, pure and deterministic.

One core for `clore-run run` (one `add()` of the pipeline, then events until `idle`) and
`clore-run serve` (jobs added for as long as it runs). Like graphlib's get_ready()/done():
indegree counters and a ready heap, so a whole run costs O((V + E) log V) and nothing rescans
all jobs per event. Ready jobs go by user priority, then longest remaining critical path (HEFT
upward rank), then submission order. Only *ready* jobs are in the heap, so a high-priority job
waiting on its needs never holds back a lower one that could run.

- `add()` takes jobs at any time. A need is a job still in the core, one in the same batch, or a
  settled one whose outcome the caller passes in: the core forgets jobs once settled, so a queue
  that runs for months holds only the unsettled ones.
- A new dependent lengthens its ancestors' critical paths: their ranks are raised in place and
  the ready heap gets fresh entries (stale ones are skipped when popped). The raise waits until
  a rank is read (a pop from the ready heap, any event) and then walks once for every add since,
  newest first, so a chain submitted a job at a time walks its length once, not once per job:
  the ranks come out the same in any order (each is the largest of its duration plus a
  dependent's rank), and nothing before the read looks at them.
- Settling goes through a work list, never recursion: a failure at the root of a 20,000-deep
  chain settles in one call.
- A failure's taint is data on the result (`failure_origin`), inherited through every job below.

The jobs held (their records, matrix groups, the ready heap and the rank raises) are
job_table.py's; this module is the rules applied to them. The core never reads a clock and does
no I/O: it is fed events with the time and answers with commands. The driver and the simulator
run the same code.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptRecorded,
    AttemptTimeout,
    CancelAll,
    CancelJob,
    Command,
    Event,
    HoldOver,
    HoldStarts,
    KillAttempt,
    Requeued,
    SetTimer,
    Settled,
    StartAttempt,
    StopCause,
    TimerFired,
    TimerToken,
    Wake,
)
from runner.core.job_table import OUT, Entry, JobState, JobTable, Phase, Slot
from runner.core.model import Attempt, Condition, FailureKind, Job, JobResult, JobStatus
from runner.core.outcome import (
    PASSED_CLEAN,
    NeedOutcome,
    counts_as_failure,
    inherited_origin,
    need_outcome,
    skip_reason,
)
from runner.core.retry import RETRY_TABLE, backoff_s, should_retry

# Where they were first defined: serve, the driver and the placing core import them from here.
__all__ = ["OUT", "Entry", "JobState", "Phase", "Placer", "Scheduler"]

_NO_OUTCOMES: Mapping[str, NeedOutcome] = MappingProxyType({})  # a job without needs hears none
_Work = tuple[str, JobStatus | None, str]  # (job, status to settle with or None: decide, reason)


class Placer(Protocol):
    """Who gets a place for each attempt, told at once instead of through commands: the
    server book of a core with servers (`placing.PlacingCore`). With one, the scheduler
    emits no StartAttempt (the attempt is handed to `want`), and it tells `settled` and
    `requeued` of the Settled and Requeued it emits, each as it makes it, so the placer
    hears of them in the order a reader of the commands would; the commands themselves are
    still emitted."""

    def want(self, job_id: str, attempt: int, timeout_s: float, now: float) -> None:
        """Attempt `attempt` may start: get it a place."""

    def requeued(self, job_id: str, at: float) -> None:
        """The job's next attempt is due at `at`."""

    def settled(self, result: JobResult, now: float) -> None:
        """The job is final."""

    def kill(self, job_id: str, reason: FailureKind) -> bool:
        """The attempt out is to be killed: True to emit the KillAttempt (it runs
        somewhere); False when the placer ended it itself (it had no place yet) and
        reports its end to the scheduler once the scheduler's current call returns."""


class Scheduler:
    """Schedules jobs under one concurrency cap. Not thread-safe: one caller feeds it."""

    def __init__(
        self,
        capacity: int,
        backoff: Callable[[int], float] = backoff_s,
        placer: Placer | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._backoff = backoff
        self._placer = placer
        self._table = JobTable()
        # The table's records, read on every event: the table alone adds and removes them.
        self._slots = self._table.slots
        self._out_count = 0  # attempts out (placing or running)
        self._hold_until = float("-inf")
        self._stop: tuple[StopCause, str] | None = None
        self._work: deque[_Work] = deque()
        self._out: list[Command] = []

    # -- queries ---------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing left: every job added so far is settled."""
        return not self._table.slots

    @property
    def attempts_out(self) -> int:
        return self._out_count

    @property
    def stop_cause(self) -> StopCause | None:
        """Why everything was cancelled (the first CancelAll while jobs were left), or None."""
        return self._stop[0] if self._stop else None

    @property
    def stop_reason(self) -> str | None:
        return self._stop[1] if self._stop else None

    def __len__(self) -> int:
        """Jobs not settled yet (running ones included)."""
        return len(self._table)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._table.slots

    def job(self, job_id: str) -> Job:
        return self._table.slots[job_id].job

    def jobs(self) -> Iterator[Job]:
        """The unsettled jobs, in the order they were added."""
        return self._table.jobs()

    def state(self, job_id: str) -> JobState | None:
        return self._table.state(job_id)

    # -- input -----------------------------------------------------------------------------

    def add(
        self,
        jobs: Sequence[Job | Entry],
        settled_needs: Mapping[str, NeedOutcome],
        now: float,
        ranks: Mapping[str, float] | None = None,
    ) -> list[Command]:
        """Queue `jobs`. Every need must be in the core, in `jobs`, or in `settled_needs`.
        `ranks`: the batch's upward ranks (by `duration_hint_s`), when the caller has them."""
        work = self._work
        for slot, entry in self._table.add(jobs, settled_needs, ranks):
            # Its pending count is final once its own needs are linked: it can be queued now.
            if entry is not None and entry.running:
                slot.phase = Phase.RUNNING
                self._out_count += 1
            elif slot.pending == 0:
                work.append((slot.job.id, None, ""))
        return self._settle_and_start(now)

    def placed(self, job_id: str, attempt: int, now: float) -> list[Command]:
        """`handle(AttemptPlaced(job_id, attempt), now)` without the look for its kind: the
        core with servers hears one for every attempt."""
        if self._table.raises:
            self._table.make_raises()
        self._placed(job_id, attempt, now)
        return self._settle_and_start(now)

    def handle(self, event: Event, now: float) -> list[Command]:
        if self._table.raises:
            self._table.make_raises()
        if isinstance(event, AttemptEnded):
            self._ended(event.job_id, event.attempt, now)
        elif isinstance(event, AttemptPlaced):
            self._placed(event.job_id, event.attempt, now)
        elif isinstance(event, TimerFired):
            self._timer(event.token, now)
        elif isinstance(event, CancelJob):
            self._cancel_one(event.job_id, event.reason)
        elif isinstance(event, CancelAll):
            self._cancel_all(event.reason, event.cause)
        elif isinstance(event, HoldStarts):
            self._hold(event.until, now)
        return self._settle_and_start(now)

    # -- events ----------------------------------------------------------------------------

    def _ended(self, job_id: str, attempt: Attempt, now: float) -> None:
        slot = self._slots.get(job_id)
        if slot is None or slot.phase not in OUT or slot.attempts != attempt.number:
            return  # a stale report (the job was settled by other means)
        self._out_count -= 1
        slot.phase = Phase.WAITING
        if attempt.failure is not None and slot.kill is not None:
            attempt = replace(attempt, failure=slot.kill[0], message=slot.kill[1])
        slot.kill = None
        slot.history = (*slot.history, attempt)
        self._out.append(AttemptRecorded(job_id, attempt))
        kind = attempt.failure
        if kind is None:
            self._work.append((job_id, JobStatus.PASSED, ""))
            return
        rule = RETRY_TABLE[kind]
        if self._stop is None and should_retry(
            kind, slot.retries_used, slot.job.retries, slot.infra_used
        ):
            if rule.spends_retries:
                slot.retries_used += 1
            else:
                slot.infra_used += 1
            at = now + self._backoff(slot.attempts)
            self._out.append(Requeued(job_id, at, slot.retries_used, slot.infra_used))
            if self._placer is not None:
                self._placer.requeued(job_id, at)
            self._wait(slot, at)
            return
        self._work.append((job_id, rule.final_status, attempt.message or kind.value))

    def _placed(self, job_id: str, number: int, now: float) -> None:
        slot = self._slots.get(job_id)
        if slot is None or slot.phase is not Phase.PLACING or slot.attempts != number:
            return
        slot.phase = Phase.RUNNING
        if slot.kill is None:
            timeout = slot.job.timeout_s
            self._out.append(SetTimer(now + timeout, AttemptTimeout(job_id, number)))

    def _timer(self, token: TimerToken, now: float) -> None:
        if isinstance(token, AttemptTimeout):
            slot = self._slots.get(token.job_id)
            running = slot is not None and slot.phase is Phase.RUNNING
            if slot is not None and running and slot.attempts == token.number:
                limit = slot.job.timeout_s
                self._kill(slot, FailureKind.TIMEOUT, f"timed out after {limit:g} s")
        elif isinstance(token, Wake):
            slot = self._slots.get(token.job_id)
            if slot is not None and slot.phase is Phase.TIMER and now >= (slot.wake_at or now):
                self._table.make_ready(slot)
        # HoldOver: the hold is over; starting what is ready follows every event

    def _cancel_one(self, job_id: str, reason: str) -> None:
        slot = self._slots.get(job_id)
        if slot is None:
            return
        if slot.phase in OUT:
            self._kill(slot, FailureKind.CANCELLED, reason)
        else:
            self._work.append((job_id, JobStatus.CANCELLED, reason))

    def _cancel_all(self, reason: str, cause: StopCause) -> None:
        if self._stop is not None or not self._slots:
            return  # a run that finished was not stopped
        self._stop = (cause, reason)
        self._table.clear_ready()
        for job_id, slot in self._slots.items():
            if slot.phase in OUT:
                self._kill(slot, FailureKind.CANCELLED, reason)
            else:
                self._work.append((job_id, JobStatus.CANCELLED, reason))

    def _hold(self, until: float, now: float) -> None:
        if until > self._hold_until:
            self._hold_until = until
            if until > now:
                self._out.append(SetTimer(until, HoldOver()))

    def _kill(self, slot: Slot, kind: FailureKind, message: str) -> None:
        if slot.kill is None:
            slot.kill = (kind, message)
            if self._placer is None or self._placer.kill(slot.job.id, kind):
                self._out.append(KillAttempt(slot.job.id, kind))
        elif kind is FailureKind.CANCELLED and slot.kill[0] is not FailureKind.CANCELLED:
            slot.kill = (kind, message)  # a timeout's kill under way: now it must not retry

    # -- transitions -----------------------------------------------------------------------

    def _settle_and_start(self, now: float) -> list[Command]:
        work, slots = self._work, self._slots
        while work:
            job_id, status, reason = work.popleft()
            slot = slots.get(job_id)
            if slot is None:
                continue  # settled already (cancelled, then reached again)
            if status is not None:
                self._finalize(slot, status, reason, now)
            elif slot.phase is Phase.WAITING:
                self._decide(slot, now)
        return self._start_ready(now)

    def _decide(self, slot: Slot, now: float) -> None:
        """Every need is settled: settle the job as skipped, or wait for a time, or queue it."""
        job = slot.job
        # Every need passed, nothing failed above (no outcome but the clean one was kept): no
        # origin, and only failure() skips it. Else every need's outcome, the clean included.
        clean = slot.outcomes is None
        outcomes: Mapping[str, NeedOutcome] = _NO_OUTCOMES
        if not clean or job.condition is Condition.FAILURE:
            odd = slot.outcomes or _NO_OUTCOMES
            outcomes = {n: odd.get(n, PASSED_CLEAN) for n in job.needs}
        slot.origin = "" if clean else inherited_origin(job, outcomes)
        if self._stop is not None:
            self._work.append((job.id, JobStatus.CANCELLED, self._stop[1]))
            return
        if clean and job.condition is not Condition.FAILURE:
            skipped = None
        else:
            skipped = skip_reason(job, outcomes, slot.origin)
        if skipped is not None:
            self._work.append((job.id, JobStatus.SKIPPED, skipped))
            return
        slot.outcomes = None  # read once: a job runs on without them
        wake = max(job.not_before or now, slot.wake_at or now)
        if wake > now:
            self._wait(slot, wake)
        else:
            self._table.make_ready(slot)

    def _wait(self, slot: Slot, at: float) -> None:
        slot.phase, slot.wake_at = Phase.TIMER, at
        self._out.append(SetTimer(at, Wake(slot.job.id)))

    def _finalize(self, slot: Slot, status: JobStatus, reason: str, now: float) -> None:
        job = slot.job
        self._table.remove(job)
        failed = counts_as_failure(job, status)
        origin = job.id if failed else slot.origin
        result = JobResult(job.id, status, reason, slot.history, origin)
        self._out.append(Settled(result))
        if self._placer is not None:
            self._placer.settled(result, now)
        if slot.dependents:
            outcome = need_outcome(job, result)
            clean = outcome is PASSED_CLEAN  # what a dependent assumes of a need it was not told
            slots, work = self._slots, self._work
            for child_id in slot.dependents:
                child = slots.get(child_id)
                if child is None:
                    continue
                if not clean:
                    if child.outcomes is None:
                        child.outcomes = {}
                    child.outcomes[job.id] = outcome
                child.pending -= 1
                if child.pending == 0:
                    work.append((child_id, None, ""))
        if failed and status is not JobStatus.CANCELLED and job.fail_fast and job.matrix:
            self._fail_fast(job)

    def _fail_fast(self, failed: Job) -> None:
        reason = f"fail-fast: '{failed.id}' failed"
        for slot in self._table.matrix_group(failed.group):
            if slot.phase in OUT:
                self._kill(slot, FailureKind.CANCELLED, reason)
            else:
                self._work.append((slot.job.id, JobStatus.CANCELLED, reason))

    def _start_ready(self, now: float) -> list[Command]:
        """Start ready jobs while there is capacity; hand back the commands gathered."""
        placer = self._placer
        table = self._table
        if table.raises and table.any_ready and self._out_count < self.capacity:
            table.make_raises()  # the keys of older ready jobs are compared
        while self._out_count < self.capacity and now >= self._hold_until:
            slot = table.pop_ready()
            if slot is None:
                break
            slot.phase = Phase.PLACING
            slot.attempts += 1
            self._out_count += 1
            job_id = slot.job.id
            if placer is None:
                self._out.append(StartAttempt(job_id, slot.attempts, slot.job.timeout_s))
            else:
                placer.want(job_id, slot.attempts, slot.job.timeout_s, now)
        out, self._out = self._out, []
        return out
