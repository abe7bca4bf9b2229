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

The core never reads a clock and does no I/O: it is fed events with the time and answers with
commands. The driver and the simulator run the same code.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from runner.core import graph
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
from runner.core.model import Attempt, Condition, FailureKind, Job, JobResult, JobStatus
from runner.core.outcome import (
    PASSED_CLEAN,
    NeedOutcome,
    counts_as_failure,
    inherited_origin,
    need_outcome,
    skip_reason,
)
from runner.core.ranks import Key, Ranked, raise_ranks
from runner.core.retry import RETRY_TABLE, backoff_s, should_retry


class Phase(str, enum.Enum):
    WAITING = "waiting"  # for needs to settle
    TIMER = "timer"  # for a time: not-before, or a retry's backoff
    READY = "ready"  # for a free slot (or the end of a hold)
    PLACING = "placing"  # an attempt is out, getting a place (renting, booting, connecting)
    RUNNING = "running"  # placed: the script runs


OUT = (Phase.PLACING, Phase.RUNNING)  # an attempt is out


@dataclass(frozen=True)
class JobState:
    """Where an unsettled job stands."""

    phase: Phase
    needs: tuple[str, ...] = ()  # the needs not settled yet (WAITING)
    until: float | None = None  # when the timer ends (TIMER)
    attempts: int = 0  # attempts made, the one out included
    # PLACING, with a core that holds servers: what its server is doing (None: it has one)
    server: str | None = None


@dataclass(frozen=True)
class Entry:
    """A job handed to the core, with what a store knows of its past (serve's recovery)."""

    job: Job
    seq: int  # submission order: the last tie-breaker
    attempts: int = 0  # attempts already made
    retries_used: int = 0
    infra_used: int = 0
    wake_at: float | None = None  # a retry's backoff ends at this time
    running: bool = False  # attempt `attempts` is out; an AttemptEnded for it must follow

    @classmethod
    def of(cls, item: Job | Entry) -> Entry:
        return item if isinstance(item, Entry) else cls(item, item.index)


_NO_OUTCOMES: Mapping[str, NeedOutcome] = MappingProxyType({})  # a job without needs hears none
_Work = tuple[str, JobStatus | None, str]  # (job, status to settle with or None: decide, reason)


class _Slot:
    """An unsettled job as the scheduler holds it. A plain class with slots and positional
    arguments: one is made for every job added, and read on every event about it. What a
    job may not need is not made for it (a leaf's dependents, the outcomes of needs that
    passed cleanly, a list of attempts): at 10,000 jobs each container is 10,000 more
    objects for the garbage collector to walk."""

    __slots__ = (
        "attempts", "dependents", "history", "infra_used", "job", "key", "kill", "origin",
        "outcomes", "pending", "phase", "retries_used", "wake_at",
    )  # fmt: skip

    def __init__(
        self,
        job: Job,
        key: Key,
        attempts: int = 0,
        retries_used: int = 0,
        infra_used: int = 0,
        wake_at: float | None = None,
    ) -> None:
        self.job = job
        self.key = key
        self.phase = Phase.WAITING
        self.pending = 0  # needs not settled yet
        self.attempts = attempts
        self.retries_used = retries_used
        self.infra_used = infra_used
        self.wake_at = wake_at
        self.origin = ""  # the first failure above it, once its needs settled
        self.dependents: list[str] | None = None  # the jobs added that need it
        # Its settled needs' outcomes that are not PASSED_CLEAN, until it is decided (None:
        # none; the usual case, which then needs no dict, nor a store for every need).
        self.outcomes: dict[str, NeedOutcome] | None = None
        self.kill: tuple[FailureKind, str] | None = None
        self.history: tuple[Attempt, ...] = ()


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
        self._slots: dict[str, _Slot] = {}
        # Matrix group -> its unsettled jobs: the one job's id while it has one (most groups
        # are a single job, and a dict each would be an object per job), else a dict of them
        # in the order they were added.
        self._groups: dict[str, str | dict[str, None]] = {}
        self._ready: list[tuple[Key, str]] = []
        self._out_count = 0  # attempts out (placing or running)
        self._hold_until = float("-inf")
        self._stop: tuple[StopCause, str] | None = None
        self._work: deque[_Work] = deque()
        self._out: list[Command] = []
        # Raises not made yet: (an older job, the rank of a new dependent), made once a rank
        # is read (`_make_raises`).
        self._raises: list[tuple[str, float]] = []

    # -- queries ---------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing left: every job added so far is settled."""
        return not self._slots

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
        return len(self._slots)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._slots

    def job(self, job_id: str) -> Job:
        return self._slots[job_id].job

    def jobs(self) -> Iterator[Job]:
        """The unsettled jobs, in the order they were added."""
        return (slot.job for slot in self._slots.values())

    def state(self, job_id: str) -> JobState | None:
        slot = self._slots.get(job_id)
        if slot is None:
            return None
        waiting = tuple(n for n in slot.job.needs if n in self._slots)
        until = slot.wake_at if slot.phase is Phase.TIMER else None
        return JobState(slot.phase, waiting, until, slot.attempts)

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
        # Plain jobs (a run's whole pipeline) are taken as they are: an Entry each would be
        # one more object per job for defaults.
        entries: dict[str, Entry] = {}
        fresh: dict[str, Job] = {}
        for item in jobs:
            if isinstance(item, Entry):
                entries[item.job.id] = item
                item = item.job
            fresh[item.id] = item
        if len(fresh) != len(jobs):
            raise ValueError("a job id appears twice in one add()")
        self._check_new(fresh, settled_needs)
        if ranks is None:
            ranks = self._batch_ranks(fresh)
        older = bool(self._slots)  # jobs from earlier adds, whose ranks the new ones may raise
        slots, groups = self._slots, self._groups
        for job in fresh.values():
            e = entries.get(job.id) if entries else None
            key = (-int(job.priority), -ranks[job.id], job.index if e is None else e.seq)
            if e is None:
                slots[job.id] = _Slot(job, key)
            else:
                slots[job.id] = _Slot(job, key, e.attempts, e.retries_used, e.infra_used, e.wake_at)
            group_key = job.group or job.id
            group = groups.get(group_key)
            if group is None:
                groups[group_key] = job.id
            elif isinstance(group, str):
                groups[group_key] = {group: None, job.id: None}
            else:
                group[job.id] = None
        work = self._work
        for job in fresh.values():
            slot = self._link(job, settled_needs)
            if older:
                rank = ranks[job.id]
                self._raises.extend((n, rank) for n in job.needs if n in slots and n not in fresh)
            # Its pending count is final once its own needs are linked: it can be queued now.
            e = entries.get(job.id) if entries else None
            if e is not None and e.running:
                slot.phase = Phase.RUNNING
                self._out_count += 1
            elif slot.pending == 0:
                work.append((job.id, None, ""))
        return self._settle_and_start(now)

    def placed(self, job_id: str, attempt: int, now: float) -> list[Command]:
        """`handle(AttemptPlaced(job_id, attempt), now)` without the look for its kind: the
        core with servers hears one for every attempt."""
        if self._raises:
            self._make_raises()
        self._placed(job_id, attempt, now)
        return self._settle_and_start(now)

    def handle(self, event: Event, now: float) -> list[Command]:
        if self._raises:
            self._make_raises()
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

    # -- adding ----------------------------------------------------------------------------

    def _check_new(self, fresh: Mapping[str, Job], settled: Mapping[str, object]) -> None:
        slots = self._slots
        for job in fresh.values():
            if job.id in slots:
                raise ValueError(f"{job.id}: already queued")
            for need in job.needs:
                if need not in fresh and need not in slots and need not in settled:
                    raise ValueError(f"{job.id}: need {need!r} is neither queued nor settled")

    def _batch_ranks(self, fresh: Mapping[str, Job]) -> dict[str, float]:
        """Upward ranks inside the batch: nothing outside it can need a job not yet added."""
        needs = {i: [n for n in job.needs if n in fresh] for i, job in fresh.items()}
        return graph.upward_ranks(needs, lambda i: fresh[i].duration_hint_s)

    def _link(self, job: Job, settled: Mapping[str, NeedOutcome]) -> _Slot:
        slots = self._slots
        slot = slots[job.id]
        for need in job.needs:
            held = slots.get(need)
            if held is not None:
                if held.dependents is None:
                    held.dependents = [job.id]
                else:
                    held.dependents.append(job.id)
                slot.pending += 1
            elif (outcome := settled[need]) is not PASSED_CLEAN:
                if slot.outcomes is None:
                    slot.outcomes = {}
                slot.outcomes[need] = outcome
        return slot

    def _make_raises(self) -> None:
        """Raise the ranks of older jobs that new dependents lengthen (runner/core/ranks.py):
        a ready job is pushed again under its new key; its old heap entry goes stale and is
        skipped when popped."""
        raises, self._raises = self._raises, []
        raise_ranks(raises, self._slots.get, self._held_needs, self._ready_again)

    def _held_needs(self, slot: Ranked) -> list[str]:
        return [n for n in slot.job.needs if n in self._slots]

    def _ready_again(self, job_id: str, slot: Ranked) -> None:
        assert isinstance(slot, _Slot)
        if slot.phase is Phase.READY:
            heapq.heappush(self._ready, (slot.key, job_id))

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
                self._make_ready(slot)
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
        self._ready.clear()
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

    def _kill(self, slot: _Slot, kind: FailureKind, message: str) -> None:
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

    def _decide(self, slot: _Slot, now: float) -> None:
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
            self._make_ready(slot)

    def _wait(self, slot: _Slot, at: float) -> None:
        slot.phase, slot.wake_at = Phase.TIMER, at
        self._out.append(SetTimer(at, Wake(slot.job.id)))

    def _make_ready(self, slot: _Slot) -> None:
        slot.phase = Phase.READY
        heapq.heappush(self._ready, (slot.key, slot.job.id))

    def _finalize(self, slot: _Slot, status: JobStatus, reason: str, now: float) -> None:
        if self._raises:  # a raise walks through the jobs still held: make them first
            self._make_raises()
        job = slot.job
        del self._slots[job.id]
        group_key = job.group or job.id
        group = self._groups[group_key]
        if isinstance(group, str):
            del self._groups[group_key]
        else:
            del group[job.id]
            if not group:
                del self._groups[group_key]
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
            self._fail_fast(job, group_key)

    def _fail_fast(self, failed: Job, group_key: str) -> None:
        reason = f"fail-fast: '{failed.id}' failed"
        group = self._groups.get(group_key, ())
        for sibling in (group,) if isinstance(group, str) else group:
            slot = self._slots[sibling]
            if slot.phase in OUT:
                self._kill(slot, FailureKind.CANCELLED, reason)
            else:
                self._work.append((sibling, JobStatus.CANCELLED, reason))

    def _start_ready(self, now: float) -> list[Command]:
        """Start ready jobs while there is capacity; hand back the commands gathered."""
        placer = self._placer
        if self._raises and self._ready and self._out_count < self.capacity:
            self._make_raises()  # the keys of older ready jobs are compared
        while self._ready and self._out_count < self.capacity and now >= self._hold_until:
            key, job_id = heapq.heappop(self._ready)
            slot = self._slots.get(job_id)
            if slot is None or slot.phase is not Phase.READY or slot.key != key:
                continue  # settled, cancelled, or re-ranked since it was pushed
            slot.phase = Phase.PLACING
            slot.attempts += 1
            self._out_count += 1
            if placer is None:
                self._out.append(StartAttempt(job_id, slot.attempts, slot.job.timeout_s))
            else:
                placer.want(job_id, slot.attempts, slot.job.timeout_s, now)
        out, self._out = self._out, []
        return out
