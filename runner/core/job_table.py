"""The unsettled jobs a scheduler holds, pure: each job's record, its matrix group, the heap of
ready jobs in rank order, and the rank raises later jobs make.

The scheduler (scheduler.py) owns the rules (what an event does to a job); this table owns the
order they are applied in and what is held. Adding a batch links every job to its held needs
(a pending count each, a dependents list on each need) and keeps the outcomes of settled needs
that did not pass cleanly; removing one takes it out of its group. Nothing here recurses.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from runner.core import graph
from runner.core.model import Attempt, FailureKind, Job
from runner.core.outcome import PASSED_CLEAN, NeedOutcome
from runner.core.ranks import Key, Ranked, raise_ranks


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


@dataclass(slots=True, eq=False)  # slots: one per job, read on every event about it
class Slot:
    """An unsettled job as the scheduler holds it. What a job may not need is not made for it
    (a leaf's dependents, the outcomes of needs that passed cleanly, a list of attempts): at
    10,000 jobs each container is 10,000 more objects for the garbage collector to walk."""

    job: Job
    key: Key
    attempts: int = 0
    retries_used: int = 0
    infra_used: int = 0
    wake_at: float | None = None
    phase: Phase = Phase.WAITING
    pending: int = 0  # needs not settled yet
    origin: str = ""  # the first failure above it, once its needs settled
    dependents: list[str] | None = None  # the jobs added that need it
    # Its settled needs' outcomes that are not PASSED_CLEAN, until it is decided (None: none;
    # the usual case, which then needs no dict, nor a store for every need).
    outcomes: dict[str, NeedOutcome] | None = None
    kill: tuple[FailureKind, str] | None = None
    history: tuple[Attempt, ...] = ()


class JobTable:
    """The unsettled jobs, by id, with their groups and the ready heap."""

    def __init__(self) -> None:
        self.slots: dict[str, Slot] = {}
        # Matrix group -> its unsettled instances, in the order they were added (fail-fast
        # cancels the others). A job of no matrix is in none: most jobs, and no dict each.
        self._groups: dict[str, dict[str, None]] = {}
        self._ready: list[tuple[Key, str]] = []
        # Raises not made yet: (an older job, the rank of a new dependent), made once a rank
        # is read (`make_raises`).
        self.raises: list[tuple[str, float]] = []

    def __len__(self) -> int:
        return len(self.slots)

    def jobs(self) -> Iterator[Job]:
        """The unsettled jobs, in the order they were added."""
        return (slot.job for slot in self.slots.values())

    def state(self, job_id: str) -> JobState | None:
        slot = self.slots.get(job_id)
        if slot is None:
            return None
        waiting = tuple(n for n in slot.job.needs if n in self.slots)
        until = slot.wake_at if slot.phase is Phase.TIMER else None
        return JobState(slot.phase, waiting, until, slot.attempts)

    # -- adding ----------------------------------------------------------------------------

    def add(
        self,
        jobs: Sequence[Job | Entry],
        settled_needs: Mapping[str, NeedOutcome],
        ranks: Mapping[str, float] | None,
    ) -> list[tuple[Slot, Entry | None]]:
        """Hold `jobs`, linked to their needs: each new record, with its Entry if it came as
        one. Every need must be held, in `jobs`, or in `settled_needs`."""
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
        older = bool(self.slots)  # jobs from earlier adds, whose ranks the new ones may raise
        slots = self.slots
        for job in fresh.values():
            e = entries.get(job.id) if entries else None
            key = (-int(job.priority), -ranks[job.id], job.index if e is None else e.seq)
            if e is None:
                slots[job.id] = Slot(job, key)
            else:
                slots[job.id] = Slot(job, key, e.attempts, e.retries_used, e.infra_used, e.wake_at)
            if job.matrix:
                self._groups.setdefault(job.group, {})[job.id] = None
        added = []
        for job in fresh.values():
            slot = self._link(job, settled_needs)
            if older:
                rank = ranks[job.id]
                self.raises.extend((n, rank) for n in job.needs if n in slots and n not in fresh)
            added.append((slot, entries.get(job.id) if entries else None))
        return added

    def _check_new(self, fresh: Mapping[str, Job], settled: Mapping[str, object]) -> None:
        slots = self.slots
        for job in fresh.values():
            if job.id in slots:
                raise ValueError(f"{job.id}: already queued")
            for need in job.needs:
                if need not in fresh and need not in slots and need not in settled:
                    raise ValueError(f"{job.id}: need {need!r} is neither queued nor settled")

    @staticmethod
    def _batch_ranks(fresh: Mapping[str, Job]) -> dict[str, float]:
        """Upward ranks inside the batch: nothing outside it can need a job not yet added."""
        needs = {i: [n for n in job.needs if n in fresh] for i, job in fresh.items()}
        return graph.upward_ranks(needs, lambda i: fresh[i].duration_hint_s)

    def _link(self, job: Job, settled: Mapping[str, NeedOutcome]) -> Slot:
        slots = self.slots
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

    # -- ranks and the ready heap ----------------------------------------------------------

    def make_raises(self) -> None:
        """Raise the ranks of older jobs that new dependents lengthen (runner/core/ranks.py):
        a ready job is pushed again under its new key; its old heap entry goes stale and is
        skipped when popped."""
        raises, self.raises = self.raises, []
        raise_ranks(raises, self.slots.get, self._held_needs, self._ready_again)

    def _held_needs(self, slot: Ranked) -> list[str]:
        return [n for n in slot.job.needs if n in self.slots]

    def _ready_again(self, job_id: str, slot: Ranked) -> None:
        assert isinstance(slot, Slot)
        if slot.phase is Phase.READY:
            heapq.heappush(self._ready, (slot.key, job_id))

    def make_ready(self, slot: Slot) -> None:
        slot.phase = Phase.READY
        heapq.heappush(self._ready, (slot.key, slot.job.id))

    @property
    def any_ready(self) -> bool:
        return bool(self._ready)

    def pop_ready(self) -> Slot | None:
        """The best ranked ready job, out of the heap (None: none is ready)."""
        ready, slots = self._ready, self.slots
        while ready:
            key, job_id = heapq.heappop(ready)
            slot = slots.get(job_id)
            if slot is not None and slot.phase is Phase.READY and slot.key == key:
                return slot
            # else settled, cancelled, or re-ranked since it was pushed
        return None

    def clear_ready(self) -> None:
        self._ready.clear()

    # -- removing --------------------------------------------------------------------------

    def remove(self, job: Job) -> None:
        """Hold the job no more."""
        if self.raises:  # a raise walks through the jobs still held: make them first
            self.make_raises()
        del self.slots[job.id]
        if job.matrix:
            group = self._groups[job.group]
            del group[job.id]
            if not group:
                del self._groups[job.group]

    def matrix_group(self, group: str) -> list[Slot]:
        """The unsettled instances of a matrix, in the order they were added."""
        return [self.slots[j] for j in self._groups.get(group, ())]
