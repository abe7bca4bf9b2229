"""The queue server's scheduling core: jobs arrive over time, pure and deterministic.

`core.scheduler.Scheduler` schedules one pipeline known up front; a queue server gets jobs for as
long as it runs, and a job may need one submitted earlier. This core keeps the same rules — a
ready heap ordered by priority, then HEFT upward rank, then submission order; `needs` with
success()/failure()/always(); the retry table and backoff of `core.retry`; fail-fast in a matrix —
and adds what a long-lived queue needs:

- `add()` takes jobs at any time. A need is either a job still in the core or a settled job,
  whose outcome the caller passes in (the core forgets jobs once final, so a server that runs for
  months holds only the unsettled ones).
- A new dependent lengthens its ancestors' critical paths: their ranks are raised in place and
  the ready heap gets fresh entries (stale ones are skipped when popped).
- `CancelJob` cancels one job; `hold()` starts nothing before a time (the daily spend limit).
- Besides the core's commands it says `AttemptEnded` and `Requeued`, which the shell persists.

Nothing here reads a clock or does I/O; settling is a work list, not recursion, so a failure at
the root of a 10,000-deep chain settles in one call.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from runner.core import graph
from runner.core.events import (
    Command,
    JobCompleted,
    JobFinished,
    KillJob,
    ScheduleTimer,
    StartJob,
    TimerFired,
)
from runner.core.model import Attempt, Condition, FailureKind, Job, JobResult, JobStatus
from runner.core.retry import RETRY_TABLE, backoff_s, should_retry

_BAD = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR, JobStatus.CANCELLED})
_WORD = {
    JobStatus.PASSED: "passed",
    JobStatus.FAILED: "failed",
    JobStatus.TIMED_OUT: "timed out",
    JobStatus.ERROR: "hit an infrastructure error",
    JobStatus.CANCELLED: "was cancelled",
    JobStatus.SKIPPED: "was skipped",
}

State = Literal["waiting", "timer", "ready", "running"]


@dataclass(frozen=True)
class NeedOutcome:
    """What a settled job means to the jobs that need it."""

    succeeded: bool  # success() accepts it
    tainted: bool  # failed, or skipped because of a failure: what failure() reacts to
    word: str  # for skip reasons: "needs 'x', which failed"


def outcome_of(job: Job, status: JobStatus, reason: str) -> NeedOutcome:
    """The outcome of a settled job, by the same rules as `Scheduler`."""
    bad = status in _BAD
    succeeded = status is JobStatus.PASSED or (job.continue_on_error and bad)
    tainted = (bad and not job.continue_on_error) or (
        status is JobStatus.SKIPPED and reason.startswith("needs '")
    )
    return NeedOutcome(succeeded, tainted, _WORD[status])


@dataclass(frozen=True)
class Entry:
    """A job handed to the core, with what the store knows of its past."""

    job: Job
    seq: int  # submission order: the last tie-breaker
    attempts: int = 0  # attempts already made
    retries_used: int = 0
    infra_used: int = 0
    wake_at: float | None = None  # a retry's backoff ends at this time
    running: bool = False  # its attempt `attempts` is out; a JobFinished for it must follow


# -- what the queue adds to the core's vocabulary ----------------------------------------------


@dataclass(frozen=True)
class CancelJob:
    """Event: cancel one job (queued: settled at once; running: killed)."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class AttemptEnded:
    """Command: persist this attempt (its failure already reflects a kill's reason)."""

    job_id: str
    attempt: Attempt


@dataclass(frozen=True)
class Requeued:
    """Command: the job waits until `at` for another attempt; persist its retry counters."""

    job_id: str
    at: float
    retries_used: int
    infra_used: int


QueueEvent = JobFinished | TimerFired | CancelJob
QueueCommand = Command | AttemptEnded | Requeued
Key = tuple[int, float, int]


@dataclass
class _Slot:
    job: Job
    seq: int
    rank: float
    state: State = "waiting"
    pending: int = 0  # needs not settled yet
    attempts: int = 0
    retries_used: int = 0
    infra_used: int = 0
    wake_at: float | None = None
    dependents: list[str] = field(default_factory=list)
    outcomes: dict[str, NeedOutcome] = field(default_factory=dict)
    kill: tuple[FailureKind, str] | None = None

    @property
    def key(self) -> Key:
        return (-int(self.job.priority), -self.rank, self.seq)


class QueueCore:
    """Schedules a queue of jobs under one concurrency cap."""

    def __init__(self, capacity: int, backoff: Callable[[int], float] = backoff_s) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._backoff = backoff
        self._slots: dict[str, _Slot] = {}
        self._groups: dict[str, set[str]] = {}
        self._ready: list[tuple[Key, str]] = []
        self._running = 0
        self._hold_until = float("-inf")
        self._settle: list[str] = []  # jobs whose needs just all settled
        self._out: list[QueueCommand] = []

    # -- queries ---------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return self._running

    def __len__(self) -> int:
        """Jobs not settled yet (running ones included)."""
        return len(self._slots)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._slots

    def state(self, job_id: str) -> State | None:
        slot = self._slots.get(job_id)
        return slot.state if slot else None

    def job(self, job_id: str) -> Job:
        return self._slots[job_id].job

    def unsettled_jobs(self) -> list[Job]:
        return [s.job for s in self._slots.values()]

    # -- input -----------------------------------------------------------------------------

    def add(
        self, entries: Sequence[Entry], settled: Mapping[str, NeedOutcome], now: float
    ) -> list[QueueCommand]:
        """Queue `entries`. Every need must be in the core, in `entries`, or in `settled`."""
        fresh = {e.job.id: e for e in entries}
        ranks = self._batch_ranks(fresh)
        for entry in entries:
            job = entry.job
            self._slots[job.id] = _Slot(
                job,
                entry.seq,
                ranks[job.id],
                attempts=entry.attempts,
                retries_used=entry.retries_used,
                infra_used=entry.infra_used,
                wake_at=entry.wake_at,
            )
            self._groups.setdefault(job.group or job.id, set()).add(job.id)
        for entry in entries:
            self._link(entry, settled)
        for job_id, rank in ranks.items():
            self._raise_ancestors(self._slots[job_id].job, rank, fresh)
        for entry in entries:
            if entry.running:
                self._slots[entry.job.id].state = "running"
                self._running += 1
        # The roots first, collected before any settles (settling readies dependents itself).
        roots = [e.job.id for e in entries if not e.running and self._slots[e.job.id].pending == 0]
        self._settle.extend(reversed(roots))
        self._drain(now)
        return self._flush(now)

    def handle(self, event: QueueEvent, now: float) -> list[QueueCommand]:
        if isinstance(event, JobFinished):
            self._finished(event.job_id, event.attempt, now)
        elif isinstance(event, TimerFired):
            self._timer(event.token, now)
        elif isinstance(event, CancelJob):
            self._cancel(event.job_id, event.reason)
        self._drain(now)
        return self._flush(now)

    def hold(self, until: float, now: float) -> list[QueueCommand]:
        """Start nothing before `until` (jobs already running go on). A longer hold in place
        stays: the spend limit's hold outlasts a backend's one-minute pause."""
        if until > self._hold_until:
            self._hold_until = until
            if until > now:
                self._out.append(ScheduleTimer(until, ("hold",)))
        return self._flush(now)

    # -- adding ----------------------------------------------------------------------------

    def _batch_ranks(self, fresh: Mapping[str, Entry]) -> dict[str, float]:
        """Upward ranks inside the batch: nothing outside it can need a job not yet added."""
        needs = {i: [n for n in e.job.needs if n in fresh] for i, e in fresh.items()}
        return graph.upward_ranks(needs, lambda i: fresh[i].job.duration_hint_s)

    def _link(self, entry: Entry, settled: Mapping[str, NeedOutcome]) -> None:
        slot = self._slots[entry.job.id]
        for need in entry.job.needs:
            if need in self._slots:
                self._slots[need].dependents.append(entry.job.id)
                slot.pending += 1
            elif need in settled:
                slot.outcomes[need] = settled[need]
            else:
                raise ValueError(f"{entry.job.id}: need {need!r} is neither queued nor settled")

    def _raise_ancestors(self, job: Job, rank: float, fresh: Mapping[str, Entry]) -> None:
        """A new dependent may lengthen the critical path of older jobs it needs."""
        stack = [(n, rank) for n in job.needs if n in self._slots and n not in fresh]
        while stack:
            job_id, below = stack.pop()
            slot = self._slots[job_id]
            rank_here = slot.job.duration_hint_s + below
            if rank_here <= slot.rank:
                continue
            slot.rank = rank_here
            if slot.state == "ready":  # the old heap entry goes stale; it is skipped when popped
                heapq.heappush(self._ready, (slot.key, job_id))
            stack.extend((n, rank_here) for n in slot.job.needs if n in self._slots)

    # -- events ----------------------------------------------------------------------------

    def _finished(self, job_id: str, attempt: Attempt, now: float) -> None:
        slot = self._slots.get(job_id)
        if slot is None or slot.state != "running" or slot.attempts != attempt.number:
            return  # a stale report (the job was settled by other means)
        slot.state = "waiting"
        self._running -= 1
        if attempt.failure is not None and slot.kill is not None:
            attempt = replace(attempt, failure=slot.kill[0], message=slot.kill[1])
        slot.kill = None
        self._out.append(AttemptEnded(job_id, attempt))
        kind = attempt.failure
        if kind is None:
            self._finalize(job_id, JobStatus.PASSED, "")
            return
        rule = RETRY_TABLE[kind]
        if should_retry(kind, slot.retries_used, slot.job.retries, slot.infra_used):
            if rule.spends_retries:
                slot.retries_used += 1
            else:
                slot.infra_used += 1
            at = now + self._backoff(slot.attempts)
            self._out.append(Requeued(job_id, at, slot.retries_used, slot.infra_used))
            self._wait(slot, at)
            return
        self._finalize(job_id, rule.final_status, attempt.message or kind.value)

    def _timer(self, token: Hashable, now: float) -> None:
        if not isinstance(token, tuple) or not token:
            return
        if token[0] == "timeout":
            _, job_id, number = token
            slot = self._slots.get(job_id)
            if slot is not None and slot.state == "running" and slot.attempts == number:
                limit = slot.job.timeout_s
                self._kill(slot, FailureKind.TIMEOUT, f"timed out after {limit:g} s")
        elif token[0] == "wake":
            slot = self._slots.get(token[1])
            if slot is not None and slot.state == "timer" and now >= (slot.wake_at or now):
                self._make_ready(slot)

    def _cancel(self, job_id: str, reason: str) -> None:
        slot = self._slots.get(job_id)
        if slot is None:
            return
        if slot.state == "running":
            self._kill(slot, FailureKind.CANCELLED, reason)
        else:
            self._finalize(job_id, JobStatus.CANCELLED, reason)

    def _kill(self, slot: _Slot, kind: FailureKind, message: str) -> None:
        if slot.kill is None:
            slot.kill = (kind, message)
            self._out.append(KillJob(slot.job.id, kind))
        elif kind is FailureKind.CANCELLED and slot.kill[0] is not FailureKind.CANCELLED:
            slot.kill = (kind, message)  # a timeout's kill under way: now it must not retry

    # -- transitions -----------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        while self._settle:
            job_id = self._settle.pop()
            if job_id in self._slots:
                self._needs_done(self._slots[job_id], now)

    def _needs_done(self, slot: _Slot, now: float) -> None:
        """Every need is settled: wait for a time, queue the job, or settle it as skipped."""
        job = slot.job
        outcomes = [(n, slot.outcomes[n]) for n in job.needs]
        unmet = [(n, o) for n, o in outcomes if not o.succeeded]
        if job.condition is Condition.SUCCESS and unmet:
            need, outcome = unmet[0]
            self._finalize(job.id, JobStatus.SKIPPED, f"needs '{need}', which {outcome.word}")
            return
        if job.condition is Condition.FAILURE and not any(o.tainted for _, o in outcomes):
            self._finalize(
                job.id, JobStatus.SKIPPED, "runs on failure(), and nothing it needs failed"
            )
            return
        slot.outcomes.clear()
        wake = max(job.not_before or now, slot.wake_at or now)
        if wake > now:
            self._wait(slot, wake)
        else:
            self._make_ready(slot)

    def _wait(self, slot: _Slot, at: float) -> None:
        slot.state, slot.wake_at = "timer", at
        self._out.append(ScheduleTimer(at, ("wake", slot.job.id)))

    def _make_ready(self, slot: _Slot) -> None:
        slot.state = "ready"
        heapq.heappush(self._ready, (slot.key, slot.job.id))

    def _finalize(self, job_id: str, status: JobStatus, reason: str) -> None:
        slot = self._slots.pop(job_id)
        job = slot.job
        group = self._groups.get(job.group or job.id)
        if group is not None:
            group.discard(job_id)
            if not group:
                del self._groups[job.group or job.id]
        self._out.append(JobCompleted(JobResult(job_id, status, reason)))
        outcome = outcome_of(job, status, reason)
        for child_id in slot.dependents:
            child = self._slots.get(child_id)
            if child is None:
                continue
            child.outcomes[job_id] = outcome
            child.pending -= 1
            if child.pending == 0:
                self._settle.append(child_id)
        failed = status in _BAD and not job.continue_on_error
        if failed and status is not JobStatus.CANCELLED and job.fail_fast and job.matrix:
            self._fail_fast(job)

    def _fail_fast(self, failed: Job) -> None:
        reason = f"fail-fast: '{failed.id}' failed"
        for sibling in sorted(self._groups.get(failed.group or failed.id, ())):
            slot = self._slots.get(sibling)
            if slot is None:
                continue
            if slot.state == "running":
                self._kill(slot, FailureKind.CANCELLED, reason)
            else:
                self._finalize(sibling, JobStatus.CANCELLED, reason)

    def _flush(self, now: float) -> list[QueueCommand]:
        """Start ready jobs while there is capacity; hand back the commands gathered."""
        while self._ready and self._running < self.capacity and now >= self._hold_until:
            key, job_id = heapq.heappop(self._ready)
            slot = self._slots.get(job_id)
            if slot is None or slot.state != "ready" or slot.key != key:
                continue  # settled, cancelled, or re-ranked since it was pushed
            slot.state = "running"
            slot.attempts += 1
            self._running += 1
            self._out += [
                StartJob(job_id, slot.attempts, slot.job.timeout_s),
                ScheduleTimer(now + slot.job.timeout_s, ("timeout", job_id, slot.attempts)),
            ]
        out, self._out = self._out, []
        return out
