"""The jobs a server book knows, and the ranked queue of those waiting for a server, pure.

One record per job (`Known`): its needs and dependents the book holds, its key (user
priority, minus its remaining critical path, file order), its expected and worst ends once
known, and, while it waits for a server, the attempt that waits. Waiting jobs are queued in a
heap by key; an entry is stale once its job is placed, dropped or wanted again (a newer
sequence number), and skipped when popped. Jobs added later raise the ranks of the older
jobs they need (runner/core/ranks.py), before any key is read. A settled job is forgotten
once no dependent of it wants anything more: a queue that runs for months holds only what
may still ask for a server.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from runner.core import graph
from runner.core.model import FailureKind, Job
from runner.core.ranks import Key, Ranked, raise_ranks
from runner.core.rentals import Market, NoMarket, Quote

Entry = tuple[Key, int, str]  # a queue entry: key, sequence number, job


class WaitReason(str, enum.Enum):
    """What a waiting job waits for, once a decision has said."""

    BUDGET = "budget"  # the budget cannot hold its worst case yet
    CAP = "cap"  # the cap on servers is reached
    BOOT = "boot"  # its server is booting
    REUSE = "reuse"  # a server that will come free was promised to it
    RELEASE = "release"  # a server being given back must be released first


@dataclass(frozen=True)
class Unplaceable:
    """An attempt the book could not give a server: it ends with `failure`."""

    job_id: str
    attempt: int
    failure: FailureKind
    message: str


@dataclass(slots=True, eq=False)  # slots: one per job, read on every decision about it
class Known:
    """A job the book holds, everything it keeps about it in one record: one is made for each
    job added and dropped when the job is forgotten, so a job costs one entry of one dict,
    not one in each of eight."""

    job: Job
    needs: tuple[str, ...]  # its needs the book holds
    key: Key
    expected_s: float | None  # how long it should run (None: unknown)
    # The jobs needing it, in the order added (None: none yet; most jobs are leaves, and an
    # empty dict each is 10,000 more objects for the garbage collector to walk).
    dependents: dict[str, None] | None = None
    open: int = 0  # how many of those are not settled yet
    ends_known: int = 0  # how many of its needs have an expected end
    end: float | None = None  # its expected (or actual) end, once known
    worst_end: float | None = None  # and at the latest
    settled: bool = False
    rent_failures: tuple[str, ...] = ()  # this attempt's failed rents: why
    # While it waits for a server (in `KnownJobs.waiting`): the attempt that waits, its
    # timeout, and the sequence number of its live entry in the queue.
    attempt: int = 0
    timeout_s: float = 0.0
    seq: int = 0
    wanted_at: float = 0.0  # when it asked for a server


class KnownJobs:
    """The jobs a book holds, which of them wait for a server, in what order, and why. Its
    collections are its own: the other parts read them through read-only properties and
    change them only through its methods."""

    def __init__(self, market: Market, durations_s: Mapping[str, float] | None = None) -> None:
        self._market = market
        self._fits_all = type(market) is NoMarket  # fixed hosts: every job fits each
        # Unsettled jobs, and settled ones a dependent still needs (for their ends and warm
        # files): forgotten after that.
        self._records: dict[str, Known] = {}
        self._known_s = dict(durations_s or {})
        # The scheduler of the same run orders its ready jobs by these: it takes them from here.
        self._ranks: dict[str, float] = {}
        self._waiting: dict[str, Known] = {}  # ready jobs with no server yet
        self.queue: list[Entry] = []
        # Raises of older jobs' ranks not made yet, (job, rank of a new dependent): made
        # before a rank is read (`make_raises`).
        self._raises: list[tuple[str, float]] = []
        self._seq = itertools.count()
        self._retrying: set[str] = set()  # an attempt ended, the job is not final yet
        self._retry_at: dict[str, float] = {}  # retrying jobs: when the retry is due
        self._why: dict[str, WaitReason] = {}  # waiting jobs: what they wait for, when known
        self._unplaceable: list[Unplaceable] = []

    # -- what the other parts read ---------------------------------------------------------

    @property
    def market(self) -> Market:
        """The offers the book rents from (NoMarket: it rents nothing)."""
        return self._market

    @property
    def records(self) -> Mapping[str, Known]:
        """Unsettled jobs, and settled ones a dependent still needs."""
        return self._records

    @property
    def waiting(self) -> Mapping[str, Known]:
        """Ready jobs with no server yet."""
        return self._waiting

    @property
    def ranks(self) -> Mapping[str, float]:
        """The last batch's upward ranks: the scheduler of the same run orders by these."""
        return self._ranks

    @property
    def why(self) -> Mapping[str, WaitReason]:
        """What waiting jobs wait for, as this decision has said so far."""
        return self._why

    @property
    def retrying(self) -> Set[str]:
        """Jobs whose attempt ended and that are not final yet."""
        return self._retrying

    @property
    def retry_at(self) -> Mapping[str, float]:
        """Retrying jobs: when the retry is due, once the scheduler said."""
        return self._retry_at

    @property
    def unplaceable(self) -> Sequence[Unplaceable]:
        """Attempts given no server, until the caller takes them (`take_unplaceable`)."""
        return self._unplaceable

    @property
    def raises(self) -> Sequence[tuple[str, float]]:
        """Rank raises not made yet."""
        return self._raises

    def add(self, jobs: Sequence[Job]) -> list[str]:
        """Hold `jobs`. A need the book does not hold is settled already. A job's rank counts
        its dependents in the book: a later batch raises the ranks of the jobs it needs.
        Returns the new jobs whose needs all have an expected end (none: all of them)."""
        known = self._records
        older = bool(known)  # jobs from earlier batches, whose ranks these may raise
        fresh = {j.id: j for j in jobs}
        if older:
            needs = {j.id: tuple(n for n in j.needs if n in fresh or n in known) for j in jobs}
            inside: Mapping[str, Sequence[str]] = {
                i: [n for n in ns if n in fresh] for i, ns in needs.items()
            }
        else:  # every need the book will hold is in this batch
            needs = {j.id: held_needs(j, fresh) for j in jobs}
            inside = needs
        below = graph.dependents_of(inside)
        order = graph.topological_order(inside, below)
        hint = {j.id: j.duration_hint_s for j in jobs}
        self._ranks = rank = graph.upward_ranks(inside, hint.__getitem__, order, below)
        known_s = self._known_s
        for job in jobs:
            key = (-int(job.priority), -rank[job.id], job.index)
            known[job.id] = Known(job, needs[job.id], key, known_s.get(job.id, job.estimate_s))
        if older:
            self._link_to_older(jobs, fresh)
        else:  # the batch's own dependents, in the same order, and no end is known yet
            for job_id, children in below.items():
                if children:
                    record = known[job_id]
                    record.dependents = dict.fromkeys(children)
                    record.open = len(children)
        return [j.id for j in jobs if known[j.id].ends_known == len(known[j.id].needs)]

    def _link_to_older(self, jobs: Sequence[Job], fresh: Mapping[str, Job]) -> None:
        known = self._records
        for job in jobs:
            record = known[job.id]
            for need in record.needs:
                held = known[need]
                if held.dependents is None:
                    held.dependents = {}
                held.dependents[job.id] = None
                held.open += 1
            record.ends_known = sum(known[n].end is not None for n in record.needs)
        self._raises.extend(
            (n, self._ranks[j.id]) for j in jobs for n in known[j.id].needs if n not in fresh
        )
        if self._waiting:  # queued under their keys, and numbered in the order raised
            self.make_raises()

    def make_raises(self) -> None:
        """Raise the ranks of older jobs that new dependents lengthen (runner/core/ranks.py).
        A waiting job is queued again under its new key, its old entry made stale by a new
        sequence number.

        Only the keys of waiting and due jobs are read, so the raises wait while no job
        waits (serve adds a chain a job at a time while its head runs), and are made before
        a job waits, a due one is ordered or a job settles. With no job waiting none is
        queued, so the sequence numbers come out the same in any order too."""
        raises, self._raises = self._raises, []
        raise_ranks(raises, self._unsettled, _held_needs_of, self._queue_again)

    def _unsettled(self, job_id: str) -> Known | None:
        record = self._records[job_id]
        return None if record.settled else record  # a settled job's rank orders nothing

    def _queue_again(self, job_id: str, record: Ranked) -> None:
        if job_id in self._waiting:
            assert isinstance(record, Known)
            record.seq = next(self._seq)
            heapq.heappush(self.queue, (record.key, record.seq, job_id))

    # -- waiting -----------------------------------------------------------------------------

    def want(self, job_id: str, attempt: int, timeout_s: float, now: float = 0.0) -> Known:
        """The job waits for a server for attempt `attempt`: queued under its key."""
        if self._raises:
            self.make_raises()
        record = self._records[job_id]
        record.attempt, record.timeout_s, record.wanted_at = attempt, timeout_s, now
        record.seq = seq = next(self._seq)
        self._waiting[job_id] = record
        heapq.heappush(self.queue, (record.key, seq, job_id))
        self._retrying.discard(job_id)
        self._retry_at.pop(job_id, None)
        record.rent_failures = ()
        return record

    def pop_waiting(self) -> Entry | None:
        """The best waiting job's queue entry, taken off the queue (None: none waits); stale
        entries on the way are dropped. The caller pushes back what it does not place."""
        queue, waiting = self.queue, self._waiting
        while queue:
            entry = heapq.heappop(queue)
            want = waiting.get(entry[2])
            if want is not None and want.seq == entry[1]:
                return entry
        return None

    def push_back(self, seen: Iterable[Entry]) -> None:
        """Queue again the entries of jobs still waiting (one placed or failed is not)."""
        queue, waiting = self.queue, self._waiting
        for entry in seen:
            if entry[2] in waiting:
                heapq.heappush(queue, entry)

    def fail(self, job_id: str, want: Known, kind: FailureKind, message: str) -> None:
        """The waiting attempt gets no server: it ends with `kind`."""
        del self._waiting[job_id]
        self._unplaceable.append(Unplaceable(job_id, want.attempt, kind, message))

    def take_unplaceable(self) -> list[Unplaceable]:
        """The attempts given no server since the last take."""
        failed, self._unplaceable = self._unplaceable, []
        return failed

    def placed(self, job_id: str) -> Known:
        """The waiting job got a server: it waits no more."""
        want = self._waiting.pop(job_id)
        if job_id in self._why:
            del self._why[job_id]
        return want

    def unwant(self, job_id: str) -> Known | None:
        """The job no longer wants a server (killed while waiting): the record that waited
        (None: it was not waiting)."""
        return self._waiting.pop(job_id, None)

    def waits_for(self, job_id: str, reason: WaitReason, first: bool = False) -> None:
        """Say what the waiting job waits for (`first`: unless this decision said already)."""
        if first:
            self._why.setdefault(job_id, reason)
        else:
            self._why[job_id] = reason

    def new_decision(self) -> None:
        """Each decision says afresh what a job waits for."""
        if self._why:
            self._why.clear()

    # -- retries ---------------------------------------------------------------------------

    def attempt_ended(self, job_id: str) -> None:
        """The job's attempt ended; until it is wanted again or final, it may be retried."""
        self._retrying.add(job_id)

    def retry_due(self, job_id: str, at: float) -> None:
        """The job's next attempt is due at `at` (a retry's backoff)."""
        self._retry_at[job_id] = at

    # -- settling ----------------------------------------------------------------------------

    def settle(self, job_id: str) -> Known | None:
        """The job is final: it wants nothing more. Its record (None: not held) stays until
        `forget_settled`, once its end has been told to its dependents."""
        if self._raises:  # a raise stops at settled jobs: make them first
            self.make_raises()
        known = self._records
        record = known.get(job_id)
        if record is not None and not record.settled:
            record.settled = True
            for need in record.needs:
                known[need].open -= 1
        self._retrying.discard(job_id)
        self._retry_at.pop(job_id, None)
        self._waiting.pop(job_id, None)
        return record

    def forget_settled(self, job_id: str, record: Known) -> None:
        """Forget the settled job, and each of its needs, once no dependent wants more."""
        known = self._records
        if not record.open:
            self._forget(job_id, record)
        for need in record.needs:
            held = known.get(need)
            if held is not None and held.settled and not held.open:
                self._forget(need, held)

    def _forget(self, job_id: str, record: Known) -> None:
        known = self._records
        for need in record.needs:  # settled, and now no dependent of anything
            held = known.get(need)
            if held is not None and held.dependents is not None:
                held.dependents.pop(job_id, None)
        del known[job_id]

    # -- reading -----------------------------------------------------------------------------

    def fits(self, quote: Quote, job_id: str) -> bool:
        """Could the job run on a server of `quote`: its GPU ask, and for a server rented
        already, the image it was started with and the trust domain of what ran on it (a
        server that ran one domain's job is never another domain's)."""
        if self._fits_all:
            return True
        job = self._records[job_id].job
        if quote.trust is not None and quote.trust != job.trust:
            return False
        if quote.image is not None and quote.image != (job.image or ""):
            return False
        return self._market.fits(quote, job.gpu)

    def key_of(self, job_id: str) -> Key:
        return self._records[job_id].key


def _held_needs_of(record: Ranked) -> tuple[str, ...]:
    assert isinstance(record, Known)
    return record.needs


def held_needs(job: Job, fresh: Mapping[str, Job]) -> tuple[str, ...]:
    """The job's needs among `fresh`: usually all of them, and then its own tuple."""
    for need in job.needs:
        if need not in fresh:
            return tuple(n for n in job.needs if n in fresh)
    return job.needs
