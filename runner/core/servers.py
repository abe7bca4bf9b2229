"""The servers a run holds, and every decision about them, pure.

The book is told which jobs are ready (`want`), which attempts ended and which jobs are final,
and what became of each server; after each batch `decide(now)` answers with commands: rent a
server (a budget reservation is made first), start a job on one, give one back. The rules:

- Placement: a ready server runs the best waiting job it fits, first the job it was rented for,
  then a job that needs the one that just ran there (its files are warm), then by priority.
- Renting: a waiting job with no server coming rents the best offer, when a slot under the cap
  and the budget allow. The reservation is the rental's worst case: the longest boot, the
  longest wait for its needs and the job's timeout, at the price with the renter's fee, plus the
  creation fee whenever the order could live long enough to be charged it.
- Rent ahead: once every need of a job has an expected end, the job's server is rented when
  those ends are one expected boot away, unless a server it fits will be free for it by then.
- Give back: a server no waiting job fits, and no job is expected to want within one boot, is
  released at once; one that some job will soon want is kept for at most a boot.

Servers that already exist (SSH hosts, local slots) are the same model, never rented or given
back before the end. Nothing here reads a clock, does I/O or recurses.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from runner.core import graph
from runner.core.budget import DAY_S, Budget
from runner.core.events import SetTimer
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.model import FailureKind, Job
from runner.core.money import usd_text
from runner.core.ranks import Key, Ranked, raise_ranks
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    JobNote,
    Market,
    NoMarket,
    Provisioning,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerEvent,
    ServerLost,
    ServerReady,
    ServerReleased,
    StartOn,
    rental_cost_usd,
)

# After a script's timeout the job is killed and its artifacts fetched: the budget holds a
# server this much longer than the timeout.
AFTER_SCRIPT_S = 120.0
MAX_OFFERS_PER_ATTEMPT = 5  # hosts tried for one attempt before it fails as provisioning
_EPS_S = 1e-6
_AFTER_TIE_S = 1e-3
TIMER = "servers"  # the first element of every timer token the book asks for
# A late boot that cannot be hedged yet (its job not ready, or its hedge still booting) is
# looked at again this often: a hedge that fails leaves a boot to hedge again at once.
HEDGE_AGAIN_S = 10.0


@dataclass(slots=True)  # slots: its fields are read on every decision
class _Server:
    """A server the book knows: rented or a fixed host, booting or ready, busy or idle."""

    id: int
    quote: Quote
    rented: bool
    since: float  # when the create was sent (a fixed host: when the run began)
    ready_at: float | None = None  # None: still booting
    job: str | None = None  # the job running on it
    claim: str | None = None  # the job it is meant for next (rented for it, or expected)
    # The jobs expected to follow `claim` on it, in order: a chain planned onto one server
    # rents nothing ahead for its later links.
    after: list[str] = field(default_factory=list)
    # Won back for this job's retry (a spot order outbid, its bid raised): no other job takes
    # it, and no other decision gives it back, until that retry runs or the job is final.
    kept_for: str | None = None
    # The job it was rented for, until a job runs on it: that job's, which no other takes
    # unless the two swap (`ServerBook._may_take`).
    rented_for: str | None = None
    last_job: str | None = None
    idle_since: float = 0.0  # when its last job ended (or it came up)

    @property
    def idle(self) -> bool:
        return self.ready_at is not None and self.job is None


@dataclass(frozen=True)
class ServerView:
    """A server as the book holds it, for simulators, plans and tests."""

    id: int
    quote: Quote
    rented: bool
    booting: bool
    job: str | None
    claim: str | None
    # The job it was rented for, until a job ran on it: no other job may take it from that one.
    rented_for: str | None = None


@dataclass(frozen=True)
class Unplaceable:
    """An attempt the book could not give a server: it ends with `failure`."""

    job_id: str
    attempt: int
    failure: FailureKind
    message: str


class _Known:
    """A job the book holds, everything it keeps about it in one record: one is made for each
    job added and dropped when the job is forgotten, so a job costs one entry of one dict,
    not one in each of eight."""

    __slots__ = (
        "attempt", "dependents", "end", "ends_known", "expected_s", "job", "key", "needs",
        "open", "rent_failures", "seq", "settled", "timeout_s", "worst_end",
    )  # fmt: skip

    def __init__(
        self, job: Job, needs: tuple[str, ...], key: Key, expected_s: float | None
    ) -> None:
        self.job = job
        self.needs = needs  # its needs the book holds
        self.key = key
        self.expected_s = expected_s  # how long it should run (None: unknown)
        # The jobs needing it, in the order added (None: none yet; most jobs are leaves, and
        # an empty dict each is 10,000 more objects for the garbage collector to walk).
        self.dependents: dict[str, None] | None = None
        self.open = 0  # how many of those are not settled yet
        self.ends_known = 0  # how many of its needs have an expected end
        self.end: float | None = None  # its expected (or actual) end, once known
        self.worst_end: float | None = None  # and at the latest
        self.settled = False
        self.rent_failures: tuple[str, ...] = ()  # this attempt's failed rents: why
        # While it waits for a server (in `ServerBook._waiting`): the attempt that waits, its
        # timeout, and the sequence number of its live entry in the book's queue.
        self.attempt = 0
        self.timeout_s = 0.0
        self.seq = 0


class ServerBook:
    """Decides which servers a run holds and which job runs on which."""

    def __init__(
        self,
        jobs: Sequence[Job],
        cap: int,
        *,
        market: Market | None = None,
        budget_usd: float | None = None,
        provisioning: Provisioning = Provisioning.AHEAD,
        fixed_hosts: Sequence[Quote] = (),
        boot: BootTimes | None = None,
        durations_s: Mapping[str, float] | None = None,
        now: float = 0.0,
        hedge: HedgePolicy = NO_HEDGE,
    ) -> None:
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.cap = cap
        self.budget = Budget(budget_usd)  # the only place money is reserved
        self.provisioning = provisioning
        self.boot = boot or BootTimes()
        self._market: Market = market or NoMarket()
        self._renting = market is not None
        self._fits_all = type(self._market) is NoMarket  # fixed hosts: every job fits each
        # Unsettled jobs, and settled ones a dependent still needs (for their ends and warm
        # files): forgotten after that.
        self._jobs: dict[str, _Known] = {}
        self._known_s = dict(durations_s or {})
        # The scheduler of the same run orders its ready jobs by these: it takes them from here.
        self.ranks: dict[str, float] = {}
        self._waiting: dict[str, _Known] = {}  # ready jobs with no server yet
        self._queue: list[tuple[Key, int, str]] = []
        # Raises of older jobs' ranks not made yet, (job, rank of a new dependent): made
        # before a rank is read (`_make_raises`).
        self._raises: list[tuple[str, float]] = []
        self._seq = itertools.count()
        self._servers: dict[int, _Server] = {}
        # Ready servers running nothing, kept beside `_servers` so that each decision looks
        # at these few, not at every server held: a decision is made after every event.
        self._idle: dict[int, _Server] = {}
        self._rented: dict[int, _Server] = {}
        self._fixed_busy = 0  # servers that already exist, running a job
        self._next_server = itertools.count(1)
        self._on: dict[str, int] = {}  # job -> server it runs on
        self._claims: dict[str, int] = {}  # job -> server meant for it
        self._eta: dict[str, float] = {}  # unready jobs: when all their needs should be done
        self._due: dict[str, None] = {}  # jobs whose server should be rented ahead now
        self._starved: dict[str, None] = {}  # due, but at the cap: due again when a slot opens
        self._retrying: set[str] = set()  # an attempt ended, the job is not final yet
        self._retry_at: dict[str, float] = {}  # retrying jobs: when the retry is due
        self._excluded: set[str] = set()
        # A queue server tries a failed host again after this long (None: never, in a run):
        # a host that failed once (rented away, a slow sshd) may be fine an hour later.
        self.forgive_after_s: float | None = None
        self._excluded_at: dict[str, float] = {}  # in the order they were excluded
        self._why: dict[str, str] = {}  # waiting jobs: what they wait for, when known
        # Given back, the release not confirmed yet: server -> host. Its host is not rented
        # again until it is: a create sent sooner finds the server still rented (Clore's
        # server-already-rented), and the host would be blamed for our own order.
        self._releasing: dict[int, str] = {}
        self._cancelled = False
        self._look: set[int] = set()  # servers whose keep-or-give-back is to be decided
        self._out: list[CoreCommand] = []
        # Something the book was told since its last decision: without it a decision would
        # decide nothing new (most events are the scheduler's own: a placed attempt, a
        # timeout timer of an attempt that already ended), and is skipped.
        self._dirty = True
        self.unplaceable: list[Unplaceable] = []
        self.stop_reason: str | None = None
        # A budget that renews each UTC day (serve's daily limit): a job over what is left
        # waits for the next day instead of failing, unless it is over a whole day's.
        self._day_timer: int | None = None  # the day the book last asked to be woken on
        self._hold_until = -math.inf  # place and rent nothing before this (serve's holds)
        # A fatal rent failure cancels the run; a queue server holds its starts instead.
        self.stop_on_fatal = True
        # Hedged boots (runner/core/hedge.py): each boot and its hedge, both ways, and the
        # boots whose hedge timer came due.
        self.hedge = hedge
        self._pairs: dict[int, int] = {}
        self._hedge_due: list[int] = []
        for quote in fixed_hosts:
            server = _Server(next(self._next_server), quote, False, now, ready_at=now)
            self._servers[server.id] = server
            self._idle[server.id] = server
        self.add_jobs(jobs, now)

    # -- what the book is told -------------------------------------------------------------

    def add_jobs(self, jobs: Sequence[Job], now: float) -> None:
        """Jobs that may want a server from now on (serve adds them as they are submitted).
        A need the book does not hold is settled already. A job's rank counts its dependents
        in the book: a later batch raises the ranks of the jobs it needs."""
        self._dirty = True
        known = self._jobs
        older = bool(known)  # jobs from earlier batches, whose ranks these may raise
        fresh = {j.id: j for j in jobs}
        if older:
            needs = {j.id: tuple(n for n in j.needs if n in fresh or n in known) for j in jobs}
            inside: Mapping[str, Sequence[str]] = {
                i: [n for n in ns if n in fresh] for i, ns in needs.items()
            }
        else:  # every need the book will hold is in this batch
            needs = {j.id: _held_needs(j, fresh) for j in jobs}
            inside = needs
        below = graph.dependents_of(inside)
        order = graph.topological_order(inside, below)
        hint = {j.id: j.duration_hint_s for j in jobs}
        self.ranks = rank = graph.upward_ranks(inside, hint.__getitem__, order, below)
        known_s = self._known_s
        for job in jobs:
            key = (-int(job.priority), -rank[job.id], job.index)
            known[job.id] = _Known(job, needs[job.id], key, known_s.get(job.id, job.estimate_s))
        if older:
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
                (n, rank[j.id]) for j in jobs for n in known[j.id].needs if n not in fresh
            )
            if self._waiting:  # queued under their keys, and numbered in the order raised
                self._make_raises()
        else:  # the batch's own dependents, in the same order, and no end is known yet
            for job_id, children in below.items():
                if children:
                    record = known[job_id]
                    record.dependents = dict.fromkeys(children)
                    record.open = len(children)
        for job in jobs:
            record = known[job.id]
            if record.ends_known == len(record.needs):
                self._needs_known(job.id, now)

    def _make_raises(self) -> None:
        """Raise the ranks of older jobs that new dependents lengthen (runner/core/ranks.py).
        A waiting job is queued again under its new key, its old entry made stale by a new
        sequence number.

        Only the keys of waiting and due jobs are read, so the raises wait while no job
        waits (serve adds a chain a job at a time while its head runs), and are made before
        a job waits, a due one is ordered or a job settles. With no job waiting none is
        queued, so the sequence numbers come out the same in any order too."""
        raises, self._raises = self._raises, []
        raise_ranks(raises, self._unsettled, _held_needs_of, self._queue_again)

    def _unsettled(self, job_id: str) -> _Known | None:
        record = self._jobs[job_id]
        return None if record.settled else record  # a settled job's rank orders nothing

    def _queue_again(self, job_id: str, record: Ranked) -> None:
        if job_id in self._waiting:
            assert isinstance(record, _Known)
            record.seq = next(self._seq)
            heapq.heappush(self._queue, (record.key, record.seq, job_id))

    def budget_per_day(self, limit_usd: float, spent_today_usd: float, now: float) -> None:
        """The budget renews each UTC day: `limit_usd` a day, `spent_today_usd` of it gone.
        A server held across midnight counts whole against the new day (a worst case)."""
        self.budget.per_day(limit_usd, spent_today_usd, now)
        self._dirty = True

    def hold(self, until: float) -> None:
        """Start and rent nothing before `until` (serve's holds: its shutdown, a refused key)."""
        self._hold_until = until
        self._dirty = True
        if until < math.inf:
            self._out.append(SetTimer(until, (TIMER, "hold", 0)))

    def want(self, job_id: str, attempt: int, timeout_s: float, now: float) -> None:
        """The job is ready for attempt `attempt` and needs a server."""
        self._dirty = True
        if self._raises:
            self._make_raises()
        record = self._jobs[job_id]
        record.attempt, record.timeout_s = attempt, timeout_s
        record.seq = seq = next(self._seq)
        self._waiting[job_id] = record
        heapq.heappush(self._queue, (record.key, seq, job_id))
        # Membership tests before removals: most of these hold nothing for this job, and a
        # test is cheaper than a call.
        if job_id in self._retrying:
            self._retrying.discard(job_id)
        if job_id in self._retry_at:
            del self._retry_at[job_id]
        if job_id in self._eta:
            del self._eta[job_id]
        if job_id in self._due:
            del self._due[job_id]
        if record.rent_failures:
            record.rent_failures = ()

    def drop(self, job_id: str) -> int | None:
        """The job no longer wants a server (killed while waiting): the number of the attempt
        that waited. None: it is not waiting (it runs on a server, or is not known)."""
        self._dirty = True
        want = self._waiting.pop(job_id, None)
        if want is None:
            return None
        self._unclaim(job_id)
        return want.attempt

    def attempt_ended(self, job_id: str, now: float, server_failed: bool = False) -> None:
        """The job's attempt ended: its server is free. `server_failed`: it ended because its
        server failed under it; a rented server not reported lost after that was won back
        for the job (a spot order outbid, its bid raised) and is kept for the job's retry."""
        self._dirty = True
        server = self._servers.get(self._on.pop(job_id, -1))
        self._retrying.add(job_id)
        if server is None:
            return
        server.job, server.last_job, server.idle_since = None, job_id, now
        if not server.rented:
            self._fixed_busy -= 1
        if server_failed and server.rented:
            self._keep_for(job_id, server)
        if server.ready_at is not None:
            self._idle[server.id] = server
        self._look.add(server.id)
        if self._starved:
            self._due.update(self._starved)
            self._starved.clear()

    def requeued(self, job_id: str, at: float) -> None:
        """The job's next attempt is due at `at` (a retry's backoff)."""
        self._retry_at[job_id] = at

    def settled(self, job_id: str, now: float) -> None:
        """The job is final: it wants nothing more."""
        self._dirty = True
        if self._raises:  # a raise stops at settled jobs: make them first
            self._make_raises()
        known = self._jobs
        record = known.get(job_id)
        if record is not None and not record.settled:
            record.settled = True
            for need in record.needs:
                known[need].open -= 1
        # Tests before removals, as in `want`: most of these do not hold the job.
        if job_id in self._retrying:
            self._retrying.discard(job_id)
        for pending in (self._retry_at, self._waiting, self._eta, self._due, self._starved):
            if job_id in pending:
                del pending[job_id]
        if job_id in self._claims:
            self._unclaim(job_id)
        if self._renting:  # only renting plans with expected ends
            self._set_end(job_id, now, now, now)
        if record is None:
            return
        if not record.open:
            self._forget_job(job_id, record)
        for need in record.needs:
            held = known.get(need)
            if held is not None and held.settled and not held.open:
                self._forget_job(need, held)

    def _forget_job(self, job_id: str, record: _Known) -> None:
        """A settled job none of whose dependents wants anything more is forgotten: a queue
        that runs for months holds only what may still ask for a server."""
        known = self._jobs
        for need in record.needs:  # settled, and now no dependent of anything
            held = known.get(need)
            if held is not None and held.dependents is not None:
                held.dependents.pop(job_id, None)
        del known[job_id]

    def cancel(self, now: float) -> None:
        """Rent nothing more; give back every server no job runs on."""
        self._dirty = True
        self._cancelled = True
        self._look.update(self._servers)

    def finish(self, now: float) -> list[CoreCommand]:
        """The run is over: give everything back."""
        for server in list(self._servers.values()):
            self._release(server, now, "the run is over")
        return self._flush()

    def handle(self, event: ServerEvent, now: float) -> None:
        self._dirty = True
        server = self._servers.get(event.server)
        if isinstance(event, ServerReleased):
            self._releasing.pop(event.server, None)
            self.budget.settle(event.server, event.cost_usd)
        elif server is None:
            return  # already given back: a late report
        elif isinstance(event, ServerReady):
            self._ready(server, now)
        elif isinstance(event, ServerLost):
            self._exclude(server.quote.host, now)
            self._release(server, now, f"lost: {event.reason}")
        elif isinstance(event, RentFailed):
            self._rent_failed(server, event, now)

    def _exclude(self, host: str, now: float) -> None:
        self._excluded.add(host)
        if self.forgive_after_s is not None:
            self._excluded_at.pop(host, None)
            self._excluded_at[host] = now

    def _forgive(self, now: float) -> None:
        """Hosts excluded long enough ago may be rented again (oldest first)."""
        assert self.forgive_after_s is not None
        while self._excluded_at:
            host, at = next(iter(self._excluded_at.items()))
            if at + self.forgive_after_s > now:
                return
            del self._excluded_at[host]
            self._excluded.discard(host)

    def timer(self, token: Hashable, now: float) -> None:
        """A timer this book asked for came due."""
        self._dirty = True
        if not isinstance(token, tuple) or len(token) != 3 or token[0] != TIMER:
            return
        if token[1] == "ahead" and token[2] in self._eta:
            self._due[token[2]] = None
        elif token[1] == "look" and token[2] in self._servers:
            self._look.add(token[2])
        elif token[1] == "hedge" and token[2] in self._servers:
            self._hedge_due.append(token[2])

    # -- reading ---------------------------------------------------------------------------

    @property
    def budget_usd(self) -> float | None:
        return self.budget.limit_usd

    @property
    def spent_usd(self) -> float:
        """What the servers given back (and failed rents) cost."""
        return self.budget.spent_usd

    def cost_usd(self, now: float) -> float:
        """Spent, plus what the servers held have cost so far."""
        return self.budget.cost_usd(now)

    def committed_usd(self, now: float) -> float:
        """Spent, plus the reservation (or the cost so far, if more) of every server held."""
        return self.budget.committed_usd(now)

    def servers(self) -> list[ServerView]:
        return [
            ServerView(s.id, s.quote, s.rented, s.ready_at is None, s.job, s.claim, _rented_for(s))
            for s in self._servers.values()
        ]

    @property
    def held(self) -> int:
        """Servers held (booting, idle or busy)."""
        return len(self._servers)

    @property
    def in_use(self) -> int:
        """Servers that count as held for a person: every rented one (booting, idle or busy:
        each is billed) and each that already exists while a job runs on it (an idle one
        costs nothing and is no one's). Two ints, so another thread may read it."""
        return len(self._rented) + self._fixed_busy

    def idle_servers(self) -> list[ServerView]:
        """The servers up and running nothing."""
        return [
            ServerView(s.id, s.quote, s.rented, False, None, s.claim, _rented_for(s))
            for s in sorted(self._idle.values(), key=_by_id)
        ]

    @property
    def idle_count(self) -> int:
        """How many servers are up and running nothing."""
        return len(self._idle)

    @property
    def jobs_known(self) -> int:
        """Jobs the book holds: unsettled ones, and settled ones a dependent still needs."""
        return len(self._jobs)

    @property
    def running_count(self) -> int:
        """Jobs running on a server now (at most the cap)."""
        return len(self._on)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def waiting(self) -> list[str]:
        """Jobs that are ready and have no server yet."""
        return list(self._waiting)

    def wait_reason(self, job_id: str) -> str | None:
        """What a waiting job waits for ("budget", "cap", "boot", "reuse", "release"), if
        decided."""
        return self._why.get(job_id) if job_id in self._waiting else None

    def server_wait(self, job_id: str) -> str | None:
        """What a waiting job's server is doing, for a person (None: the job is not waiting)."""
        if job_id not in self._waiting:
            return None
        server = self._servers.get(self._claims.get(job_id, -1))
        if server is not None and server.ready_at is None:
            return f"renting a server for it ({_label(server.quote)}), booting"
        why = self._why.get(job_id)
        if why == "cap":
            return f"waiting for a server: {len(self._servers)} of {self.cap} held (the cap)"
        if why == "budget":
            daily = " today" if self.budget.day is not None else ""
            return f"waiting for a server: the budget{daily} cannot hold its worst case yet"
        if why == "release":
            return "waiting for a server being given back to be released"
        if why == "reuse" or server is not None:
            return "waiting for a server to come free"
        if not self._renting:  # hosts that already exist: one must come free
            return "a free slot"
        return "waiting for a server"

    def fits(self, quote: Quote, job_id: str) -> bool:
        return self._fits_all or self._market.fits(quote, self._jobs[job_id].job.gpu)

    @property
    def dirty(self) -> bool:
        """Told something since its last decision (else a decision would decide nothing)."""
        return self._dirty

    @property
    def renting(self) -> bool:
        """Does this book rent (a market), or hold only servers that already exist?"""
        return self._renting

    @property
    def expected_boot_s(self) -> float:
        return self.boot.expected_s

    # -- deciding --------------------------------------------------------------------------

    def decide(self, now: float) -> list[CoreCommand]:
        """Everything to do now, after the events so far."""
        if not self._dirty:
            return self._flush()
        if self._why:
            self._why.clear()  # each decision says afresh what a job waits for
        self.budget.new_day_if_due(now)
        if self._excluded_at:
            self._forgive(now)
        held_back = now < self._hold_until
        while True:
            if not held_back:
                self._place_on_ready_servers(now)
            if not self._cancelled and self._renting and not held_back:
                self._rent_for_waiting(now)
                if self._hedge_due:
                    self._hedge_boots(now)
                # Each pass can give jobs an expected end, making their dependents due.
                while self._due:
                    self._rent_ahead(now)
                    self._place_on_ready_servers(now)
            held = len(self._servers)
            self._give_back(now)
            # A server given back frees a slot and money: a waiting job may rent now.
            if len(self._servers) == held or not self._waiting or self._cancelled:
                self._dirty = bool(self._due or self._look)
                return self._flush()

    def _flush(self) -> list[CoreCommand]:
        out, self._out = self._out, []
        return out

    # -- placement -------------------------------------------------------------------------

    def _place_on_ready_servers(self, now: float) -> None:
        """Servers a waiting job needs the last job of go first (its files are warm there):
        with every server free, another would take that job by going first. At most `cap`
        jobs run: a backend may have more fixed hosts than the run's concurrency."""
        if not self._idle or not self._waiting:
            return
        idle = list(self._idle.values())
        if len(idle) > 1:
            idle.sort(key=_by_id)
            idle.sort(key=self._no_warm_job)  # stable: by id within each
        for server in idle:
            if not self._waiting or len(self._on) >= self.cap:
                return
            self._place_on(server, now)

    def _no_warm_job(self, server: _Server) -> bool:
        return self._warm_waiting(server) is None

    def _place_on(self, server: _Server, now: float) -> bool:
        """Start the best waiting job the server fits, in priority order, a job needing the
        one that just ran there (its files are warm) winning a tie of user priority. The job
        it was rented for has no say: when a better one waits, that one goes first, as a list
        schedule would, and the other rents again. A job whose time there the budget cannot
        hold is passed over for the next."""
        if server.kept_for is not None:  # won back for one job's retry: that one only
            return server.kept_for in self._waiting and self._start(server.kept_for, server, now)
        warm = self._warm_waiting(server)
        queue = self._queue
        seen: list[tuple[Key, int, str]] = []
        placed = False
        while queue and not placed and len(seen) <= 4 * self.cap + 16:
            entry = heapq.heappop(queue)
            want = self._waiting.get(entry[2])
            if want is None or want.seq != entry[1]:
                continue  # stale: placed, dropped or wanted again since
            seen.append(entry)
            if warm is not None and self._warm_first(warm, entry[0]):
                placed = self._may_take(warm, server) and self._start(warm, server, now)
                warm = None
            job_id = entry[2]
            if not placed and job_id in self._waiting and self.fits(server.quote, job_id):
                placed = self._may_take(job_id, server) and self._start(job_id, server, now)
        if not placed and warm is not None:
            placed = self._may_take(warm, server) and self._start(warm, server, now)
        for entry in seen:
            if entry[2] in self._waiting:  # a job placed here is not pushed back, stale
                heapq.heappush(queue, entry)
        return placed

    def _warm_first(self, warm: str, best: Key) -> bool:
        """A warm job goes before a better-ranked one of the same user priority unless that
        one's remaining path is longer by more than a tenth of a boot: the files it saves
        copying are worth seconds, a delay on the critical path is not."""
        priority, rank, _ = self._jobs[warm].key
        return priority <= best[0] and rank <= best[1] + 0.1 * self.boot.expected_s

    def _warm_waiting(self, server: _Server) -> str | None:
        if server.last_job is None:
            return None
        last = self._jobs.get(server.last_job)
        if last is None or not last.dependents:
            return None
        waiting, quote = self._waiting, server.quote
        warm = [d for d in last.dependents if d in waiting and self.fits(quote, d)]
        if len(warm) < 2:  # most often: no key to compare
            return warm[0] if warm else None
        return min(warm, key=self._key_of)

    def _key_of(self, job_id: str) -> Key:
        return self._jobs[job_id].key

    def _may_take(self, job_id: str, server: _Server) -> bool:
        """A job takes a server rented for another only when that one loses nothing by it:
        the server booting for the taker fits it instead (the two swap). Otherwise the other
        job would rent a server again, paying a second boot and a second order."""
        claimant = server.claim
        if claimant is None or claimant == job_id or server.rented_for != claimant:
            return True  # otherwise anyone's by rank, as a list schedule
        own = self._servers.get(self._claims.get(job_id, -1))
        return (
            own is not None
            and own.ready_at is None
            and own.claim == job_id
            and self.fits(own.quote, claimant)
        )

    def _start(self, job_id: str, server: _Server, now: float) -> bool:
        want = self._waiting[job_id]
        until = now + want.timeout_s + AFTER_SCRIPT_S
        if server.rented and not self.budget.extend(server.id, until, now):
            self._why[job_id] = "budget"
            return False
        del self._waiting[job_id]
        if job_id in self._why:
            del self._why[job_id]
        claimant = server.claim
        if claimant is not None and claimant != job_id and server.rented_for == claimant:
            self._swap(job_id, claimant, server)
        else:
            if job_id in self._claims:
                self._unclaim(job_id)
            if claimant is not None and claimant != job_id:
                self._unclaim(claimant)  # a better job took it: that one plans again
        server.rented_for = None
        server.job = job_id
        if self._pairs:
            self._drop_hedges(job_id, server, now)
        if not server.rented:
            self._fixed_busy += 1
        self._idle.pop(server.id, None)
        self._on[job_id] = server.id
        if self._look:
            self._look.discard(server.id)
        if self._renting:  # only renting plans with expected ends
            expected = self._jobs[job_id].expected_s
            end = now + expected if expected is not None else None
            self._set_end(job_id, end, until, now)
        self._out.append(StartOn(job_id, want.attempt, server.id, want.timeout_s))
        return True

    # -- renting for jobs that are ready ---------------------------------------------------

    def _rent_for_waiting(self, now: float) -> None:
        queue = self._queue
        seen: list[tuple[Key, int, str]] = []
        soon_free = self._soon_free(now)  # promised to the first waiting jobs they fit
        while queue and len(seen) <= 4 * self.cap + 16:
            entry = heapq.heappop(queue)
            job_id = entry[2]
            want = self._waiting.get(job_id)
            if want is None or want.seq != entry[1]:
                continue
            seen.append(entry)
            if job_id in self._claims or self._claim_booting(job_id):
                self._why.setdefault(job_id, "boot")  # its server is coming
                continue
            promised = next((s for s in soon_free if self.fits(s.quote, job_id)), None)
            if promised is not None:
                self._why.setdefault(job_id, "reuse")
                soon_free.remove(promised)
                continue
            if not self._room(now):
                self._why.setdefault(job_id, "cap")
                if not soon_free:
                    break  # at the cap, nothing frees within a boot: no one else can go
                continue
            self._rent_now(job_id, want, now)
        for entry in seen:
            if entry[2] in self._waiting:  # one that failed to rent is no longer waiting
                heapq.heappush(queue, entry)

    def _soon_free(self, now: float) -> list[_Server]:
        """Busy servers expected to be free within a boot, nobody's yet: waiting for one is
        as quick as renting, and cheaper."""
        horizon = now + self.boot.expected_s
        return [
            s
            for s in self._servers.values()
            if s.job is not None and s.claim is None and self._end_of(s.job) <= horizon
        ]

    def _end_of(self, job_id: str) -> float:
        """When the job should end (infinity: not known)."""
        record = self._jobs.get(job_id)
        end = record.end if record is not None else None
        return end if end is not None else math.inf

    def _claim_booting(self, job_id: str) -> bool:
        """Claim a booting server nobody is meant for (one rented ahead for a job that then
        went elsewhere)."""
        for server in self._servers.values():
            if server.ready_at is None and server.claim is None and self.fits(server.quote, job_id):
                self._claim(job_id, server)
                return True
        return False

    def _room(self, now: float) -> bool:
        """Is there a slot under the cap? Makes one by giving back an idle server no waiting
        job is meant for, when that is what stands in the way."""
        if len(self._servers) < self.cap:
            return True
        spare = [s for s in sorted(self._idle.values(), key=_by_id) if s.rented and s.claim is None]
        if not spare:
            return False
        self._release(spare[0], now, "making room for a job that fits no server held")
        return True

    def _rent_now(self, job_id: str, want: _Known, now: float) -> None:
        job = self._jobs[job_id].job
        quote = self._market.best(job.gpu, self._excluded | self._hosts_held())
        if quote is None:
            if self._freed_soon(job_id):
                self._why.setdefault(job_id, "release")  # short of money first, if it is
            elif not self._any_fitting_held(job_id):
                self._none_left(job_id, want)
            return
        hold_s = self.boot.allowance_s + want.timeout_s + AFTER_SCRIPT_S
        cost = rental_cost_usd(quote.usd_per_hour, hold_s, quote.creation_fee_usd)
        over = self.budget.over(cost, now)
        if over > 0:
            self._drop_ahead_rentals(now)
            over = self.budget.over(cost, now)
        if over > 0:
            self._why[job_id] = "budget"
            if self.budget.day is not None:
                self._wait_for_next_day(job_id, want, quote, hold_s, cost, now)
            elif not any(s.rented for s in self._servers.values()):
                text = self.budget.refusal(quote, hold_s, cost, over, now)
                self._fail(job_id, want, FailureKind.UNAVAILABLE, text)
            return
        self._rent(job_id, quote, now + hold_s, cost, now, ahead=False)
        self._plan_end(job_id, now + self.boot.expected_s, now + self.boot.allowance_s, now)

    def _wait_for_next_day(
        self, job_id: str, want: _Known, quote: Quote, hold_s: float, cost: float, now: float
    ) -> None:
        """A daily budget: the job waits for the next day's, unless a whole day's is short."""
        budget = self.budget
        assert budget.day is not None
        over = budget.over_a_day(cost)
        if over > 0:
            text = budget.refusal(quote, hold_s, cost, over + 1e-9, now)
            self._fail(job_id, want, FailureKind.UNAVAILABLE, f"a day's {text}")
            return
        if self._day_timer != budget.day + 1:  # once a day, for every job waiting so
            self._day_timer = budget.day + 1
            self._out.append(SetTimer(self._day_timer * DAY_S, (TIMER, "day", self._day_timer)))

    def _none_left(self, job_id: str, want: _Known) -> None:
        """No offer fits the job (any more): say why, and which hosts failed it before."""
        record = self._jobs[job_id]
        why = self._market.why_none(record.job.gpu, self._excluded)
        tried = record.rent_failures
        if not tried:
            self._fail(job_id, want, FailureKind.UNAVAILABLE, why)
            return
        message = f"{len(tried)} offers failed to start: " + "; ".join(tried[-3:]) + f" ({why})"
        self._fail(job_id, want, FailureKind.PROVISIONING_FAILED, message)

    def _drop_ahead_rentals(self, now: float) -> None:
        """Servers rented ahead for jobs not ready yet give their money to a job that is."""
        for server in list(self._servers.values()):
            ahead = server.claim is not None and server.claim not in self._waiting
            if server.rented and server.job is None and ahead and server.kept_for is None:
                self._release(server, now, "its money is needed by a job that is ready")

    def _rent(
        self, job_id: str, quote: Quote, until: float, cost: float, now: float, ahead: bool
    ) -> None:
        server = _Server(next(self._next_server), quote, True, now)
        server.rented_for = job_id
        self.budget.reserve(server.id, quote, now, until)
        self._servers[server.id] = server
        self._rented[server.id] = server
        self._claim(job_id, server)
        self._out.append(RentServer(server.id, quote, job_id, cost, ahead))
        self._hedge_timer(server)

    # -- hedging slow boots (when: runner/core/hedge.py) ----------------------------------

    def _hedge_timer(self, server: _Server) -> None:
        """Look at this boot again when it has run long enough to be hedged."""
        if self.hedge.enabled:
            at = server.since + self._hedge_after(server)
            self._out.append(SetTimer(at, (TIMER, "hedge", server.id)))

    def _hedge_after(self, server: _Server) -> float:
        q = server.quote
        expected = q.boot_s if q.boot_s is not None else self.boot.expected_s
        record = self._jobs.get(server.claim or "")
        own = record.job.boot_timeout_s if record is not None else None  # the job's own bound
        bound_s = own if own is not None else self.boot.allowance_s
        return self.hedge.after_s(expected, q.fail_chance or 0.0, bound_s)

    def _hedge_boots(self, now: float) -> None:
        """Each boot due and still booting for a waiting job gets a second fitting host, if
        the policy, the cap and the budget allow; a slow boot that gets none says why."""
        due, self._hedge_due = self._hedge_due, []
        for server_id in due:
            server = self._servers.get(server_id)
            if server is None or server.ready_at is not None or server.claim is None:
                continue  # up, given back, or meant for no job now
            if now + _EPS_S < server.since + self._hedge_after(server):
                continue  # not late (a timer of an earlier plan): its own timer comes
            want = self._waiting.get(server.claim)
            if want is None or server_id in self._pairs:
                # Rented ahead, its job not ready yet; or hedged already, and the hedge may
                # fail first: look again in a while.
                self._out.append(SetTimer(now + HEDGE_AGAIN_S, (TIMER, "hedge", server_id)))
                continue
            self._hedge(server, server.claim, want, now)

    def _hedge(self, server: _Server, job_id: str, want: _Known, now: float) -> None:
        why = self.hedge.may_hedge(len(self._servers), self.cap)
        quote = None
        if why is None:
            quote = self._market.best(want.job.gpu, self._excluded | self._hosts_held())
            why = "no other host fits" if quote is None else None
        hold_s = self.boot.allowance_s + want.timeout_s + AFTER_SCRIPT_S
        cost = rental_cost_usd(quote.usd_per_hour, hold_s, quote.creation_fee_usd) if quote else 0
        if quote is not None and self.budget.over(cost, now) > 0:
            why = f"the budget cannot hold a second boot's worst case ({usd_text(cost)})"
        if why is not None or quote is None:
            late = now - server.since
            said = f"no hedge for the boot of {_label(server.quote)} ({late:.0f} s so far): {why}"
            self._out.append(JobNote(job_id, said))
            return
        hedge = _Server(next(self._next_server), quote, True, now)
        self.budget.reserve(hedge.id, quote, now, now + hold_s)
        hedge.claim = job_id  # meant for the job, as its boot is; the job's claim stays there
        self._servers[hedge.id] = self._rented[hedge.id] = hedge
        self._pairs[hedge.id], self._pairs[server.id] = server.id, hedge.id
        self._out.append(RentServer(hedge.id, quote, job_id, cost, hedge_of=server.id))
        slow = f"the boot of {_label(server.quote)} runs late ({now - server.since:.0f} s)"
        said = f"{slow}: renting {_label(quote)} beside it; the first to answer SSH runs it"
        self._out.append(JobNote(job_id, said))
        self._hedge_timer(hedge)

    def _hedge_won(self, server: _Server, now: float) -> None:
        """One of a hedged pair answers SSH: the other, still booting, goes back at once."""
        other = self._servers.get(self._pairs.get(server.id, -1))
        if other is not None and other.ready_at is None and other.job is None:
            self._release(other, now, f"hedge: {_label(server.quote)} answered SSH first")
        else:
            self._unpair(server)

    def _drop_hedges(self, job_id: str, started_on: _Server, now: float) -> None:
        """The job started: a boot still meant for it (its hedge, or a boot the job did not
        wait for) goes back at once."""
        for server_id in list(self._pairs):
            server = self._servers.get(server_id)
            if server is not None and server.claim == job_id and server.ready_at is None:
                self._release(server, now, f"hedge: {job_id} started on {_label(started_on.quote)}")

    def _unpair(self, server: _Server) -> None:
        """`server` leaves its pair (given back, failed): the job it was meant for is the
        other's from now on, so its going takes nothing from the job."""
        other_id = self._pairs.pop(server.id, None)
        if other_id is None:
            return
        self._pairs.pop(other_id, None)
        other = self._servers.get(other_id)
        job_id = server.claim
        if other is not None and job_id is not None and other.claim == job_id:
            self._claims[job_id] = other_id
            server.claim = None
            self._hedge_due.append(other_id)  # alone now: hedged at once if it runs late

    # -- renting ahead ---------------------------------------------------------------------

    def _rent_ahead(self, now: float) -> None:
        """Plan each due job onto a server that will be free for it, or rent one now. At the
        cap, a job that would need a new server waits for a slot to open."""
        if self._raises and self._due:
            self._make_raises()
        for job_id in sorted(self._due, key=self._key_of):
            del self._due[job_id]
            if job_id not in self._eta or job_id in self._claims:
                continue
            eta = self._needs_end(job_id, now)
            self._eta[job_id] = eta
            start_at = eta - self.boot.expected_s
            if start_at > now + _EPS_S:  # its needs are later than first thought
                self._out.append(SetTimer(start_at, (TIMER, "ahead", job_id)))
            elif self._server_will_be_free(job_id, eta, now):
                continue
            elif len(self._servers) >= self.cap:
                self._starved[job_id] = None
            else:
                self._rent_ahead_for(job_id, eta, now)

    def _server_will_be_free(self, job_id: str, eta: float, now: float) -> bool:
        """A server it fits will be there when its needs are done: expect that one (next on
        it, or after the job it is meant for), and plan the job's end on it."""
        for server in self._servers.values():
            if not self.fits(server.quote, job_id):
                continue
            last = server.after[-1] if server.after else server.claim
            if last is None:
                ahead_of_it = server.job
            elif self._end_of(last) < math.inf:
                ahead_of_it = last
            else:
                continue
            if ahead_of_it is not None:
                free_by, worst_free = self._end_of(ahead_of_it), self._worst_of(ahead_of_it)
            elif server.ready_at is None:
                free_by = server.since + self.boot.expected_s
                worst_free = server.since + self.boot.allowance_s
            else:
                free_by = worst_free = now
            # Waiting for a held server is right unless a server rented now would be up
            # sooner: renting ahead is for a job that would otherwise wait for a boot.
            if free_by > max(eta, now + self.boot.expected_s) + _EPS_S:
                continue
            if server.claim is None:
                self._claim(job_id, server)
            else:
                server.after.append(job_id)
                self._claims[job_id] = server.id
            self._plan_end(job_id, max(eta, free_by), worst_free, now)
            return True
        return False

    def _plan_end(self, job_id: str, start: float, worst_start: float, now: float) -> None:
        """The job should start at `start` (at worst `worst_start`): record its end."""
        record = self._jobs[job_id]
        worst_ready = max((self._worst_of(n) for n in record.needs), default=now)
        worst = max(worst_ready, worst_start) + record.job.timeout_s + AFTER_SCRIPT_S
        expected = record.expected_s
        self._set_end(job_id, start + expected if expected is not None else None, worst, now)

    def _rent_ahead_for(self, job_id: str, eta: float, now: float) -> None:
        record = self._jobs[job_id]
        job = record.job
        quote = self._market.best(job.gpu, self._excluded | self._hosts_held())
        if quote is None:
            return  # it rents (or fails) when it is ready
        worst_ready = max((self._worst_of(n) for n in record.needs), default=now)
        wait_s = max(self.boot.allowance_s, worst_ready - now)
        hold_s = wait_s + job.timeout_s + AFTER_SCRIPT_S
        cost = rental_cost_usd(quote.usd_per_hour, hold_s, quote.creation_fee_usd)
        if self.budget.over(cost, now) > 0:
            return  # ahead is a convenience: it never takes money a ready job may need
        self._rent(job_id, quote, now + hold_s, cost, now, ahead=True)
        self._plan_end(
            job_id, max(eta, now + self.boot.expected_s), now + self.boot.allowance_s, now
        )

    # -- expected times --------------------------------------------------------------------

    def _set_end(self, job_id: str, end: float | None, worst: float, now: float) -> None:
        """Record when a job is expected to end (None: unknown) and its worst case; the first
        known end of each need counts towards its dependents' rent-ahead. Only renting
        plans with them: a book of fixed hosts keeps none."""
        if not self._renting:
            return
        known = self._jobs
        record = known[job_id]
        if record.worst_end is None or worst > record.worst_end:
            record.worst_end = worst
        if end is None:
            return
        first = record.end is None
        record.end = end
        if not first:
            return
        for child in record.dependents or ():
            held = known[child]
            held.ends_known += 1
            if held.ends_known == len(held.needs):
                self._needs_known(child, now)

    def _worst_of(self, job_id: str) -> float:
        worst = self._jobs[job_id].worst_end
        if worst is None:  # every job planned with has one: its start recorded it
            raise KeyError(job_id)
        return worst

    def _needs_end(self, job_id: str, now: float) -> float:
        """When the job's needs should all be done (now, when it has none)."""
        known = self._jobs
        latest: float | None = None
        for need in known[job_id].needs:
            end = known[need].end
            if end is None:  # every need has an end once this is asked: its start set it
                raise KeyError(need)
            if latest is None or end > latest:
                latest = end
        return now if latest is None else latest

    def _needs_known(self, job_id: str, now: float) -> None:
        """Every need has an expected end: the job can be planned for."""
        record = self._jobs[job_id]
        if record.settled or job_id in self._waiting or job_id in self._on:
            return
        needs = record.needs
        eta = self._needs_end(job_id, now)
        self._eta[job_id] = eta
        if self.provisioning is not Provisioning.AHEAD or not self._renting or not needs:
            return
        start_at = eta - self.boot.expected_s
        if start_at <= now + _EPS_S:
            self._due[job_id] = None
        else:
            self._out.append(SetTimer(start_at, (TIMER, "ahead", job_id)))

    # -- claims ----------------------------------------------------------------------------

    def _claim(self, job_id: str, server: _Server) -> None:
        self._unclaim(job_id)
        server.claim = job_id
        self._claims[job_id] = server.id

    def _swap(self, job_id: str, claimant: str, server: _Server) -> None:
        """`job_id` takes `server`, rented for `claimant`, which takes the server booting
        for `job_id` in its place (`_may_take` said that one fits it)."""
        own = self._servers[self._claims.pop(job_id)]
        # Each job's followers go where it runs: their planned starts stay as they were.
        own.after, server.after = server.after, own.after
        own.claim = own.rented_for = claimant
        for moved in (claimant, *own.after):
            self._claims[moved] = own.id
        for moved in server.after:
            self._claims[moved] = server.id
        server.claim = server.after.pop(0) if server.after else None

    def _keep_for(self, job_id: str, server: _Server) -> None:
        """Hold `server` for the job's retry: jobs expected on it go elsewhere."""
        for other in (*server.after, server.claim):
            if other is not None and other != job_id:
                self._unclaim(other)
        self._claim(job_id, server)
        server.kept_for = job_id

    def _unclaim(self, job_id: str) -> None:
        server = self._servers.get(self._claims.pop(job_id, -1))
        if server is None:
            return
        if server.kept_for == job_id:
            server.kept_for = None
        if server.claim == job_id:
            server.claim = server.after.pop(0) if server.after else None
            self._look.add(server.id)
        elif job_id in server.after:
            server.after.remove(job_id)

    # -- giving back -----------------------------------------------------------------------

    def _give_back(self, now: float) -> None:
        if not self._look:
            return
        if not self._renting and not self._cancelled:
            self._look.clear()  # fixed hosts are kept to the end
            return
        look, self._look = self._look, set()
        for server_id in sorted(look):
            server = self._servers.get(server_id)
            if server is None or server.job is not None:
                continue
            if self._cancelled:
                self._release(server, now, "the run is stopping")
            elif server.rented and server.claim is None:
                self._keep_or_release(server, now)
            elif server.rented and server.ready_at is not None:
                self._wait_for_claimant(server, now)

    def _wait_for_claimant(self, server: _Server, now: float) -> None:
        """A server up before the job it is meant for waits a boot's time for it; after that
        the job is not coming soon (its needs are late, or it can never run)."""
        start = server.idle_since
        if server.claim not in self._waiting:
            start = max(start, self._eta.get(server.claim or "", start))
            start = max(start, self._retry_at.get(server.claim or "", start))
        until = start + self.boot.expected_s
        if now + _EPS_S < until:
            self._look_at(server, until)
        else:
            self._release(server, now, f"{server.claim} did not come within a boot")

    def _keep_or_release(self, server: _Server, now: float) -> None:
        # Kept for at most one boot after it fell idle (longer, a new rental would cost less),
        # for a job that waits and fits it (short of money, or beyond the placement scan) or
        # one that will want it by then.
        start = server.idle_since if server.ready_at is not None else now
        until = start + self.boot.expected_s
        soon = None
        if until > now + _EPS_S:
            waiting = (j for j in self._waiting if self.fits(server.quote, j))
            soon = next(waiting, None) or self._wanted_soon(server, until)
        if soon is None:
            self._release(server, now, "no job waiting can use it within a boot")
        elif server.ready_at is not None and not self.budget.extend(server.id, until, now):
            self._release(server, now, "keeping it for the next job would pass the budget")
        else:
            self._look_at(server, until)

    def _look_at(self, server: _Server, until: float) -> None:
        # Just after `until`: a job ending at that very moment is told first, and takes it.
        self._out.append(SetTimer(until + _AFTER_TIE_S, (TIMER, "look", server.id)))

    def _wanted_soon(self, server: _Server, until: float) -> str | None:
        """A job about to be retried that fits, or one not ready yet that fits, should be
        ready by `until`, and has no other server to go to then."""
        for job_id in self._retrying:
            if self.fits(server.quote, job_id):
                return job_id
        for job_id, eta in self._eta.items():
            if eta > until or job_id in self._claims or not self.fits(server.quote, job_id):
                continue
            if not self._covered(job_id, eta, server):
                return job_id
        return None

    def _covered(self, job_id: str, eta: float, besides: _Server) -> bool:
        """Will a server other than `besides` be free for the job when it is ready? Usually
        the one its last need runs on."""
        for other in self._servers.values():
            if other is besides or other.claim not in (None, job_id):
                continue
            free_by = self._end_of(other.job) if other.job is not None else 0.0
            if free_by <= eta + _EPS_S and self.fits(other.quote, job_id):
                return True
        return False

    def _forget(self, server: _Server) -> None:
        if not server.rented and server.job is not None:
            self._fixed_busy -= 1
        del self._servers[server.id]
        self._idle.pop(server.id, None)
        self._rented.pop(server.id, None)

    def _release(self, server: _Server, now: float, reason: str) -> None:
        self._unpair(server)
        self._forget(server)
        for job_id in (server.claim, *server.after):
            if job_id is not None:
                self._claims.pop(job_id, None)
        if server.rented:
            self.budget.given_back(server.id, now)
            self._releasing[server.id] = server.quote.host
        self._due.update(self._starved)
        self._starved.clear()
        self._out.append(ReleaseServer(server.id, reason, server.rented))

    def _hosts_held(self) -> set[str]:
        held = {s.quote.host for s in self._servers.values()}
        if self._releasing:
            held.update(self._releasing.values())
        return held

    def _freed_soon(self, job_id: str) -> bool:
        """Is the offer the job would rent on a host whose release is being confirmed? Then
        it waits for that instead of failing for want of an offer."""
        if not self._releasing:
            return False
        held = {s.quote.host for s in self._servers.values()}
        quote = self._market.best(self._jobs[job_id].job.gpu, self._excluded | held)
        return quote is not None and quote.host in self._releasing.values()

    def _any_fitting_held(self, job_id: str) -> bool:
        return any(self.fits(s.quote, job_id) for s in self._servers.values())

    # -- server events ---------------------------------------------------------------------

    def _ready(self, server: _Server, now: float) -> None:
        server.ready_at = server.idle_since = now
        if server.job is None:
            self._idle[server.id] = server
        self.boot = self.boot.with_sample(now - server.since)
        self._look.add(server.id)
        if server.id in self._pairs:
            self._hedge_won(server, now)

    def _rent_failed(self, server: _Server, event: RentFailed, now: float) -> None:
        self._unpair(server)
        self._forget(server)
        if not (event.job_cannot_run or event.fatal or event.requote):  # the host's own fault
            self._exclude(server.quote.host, now)
        self.budget.rent_failed(server.id, event.cost_usd)
        job_id = server.claim
        for meant in (server.claim, *server.after):
            if meant is not None:
                self._claims.pop(meant, None)
        if event.fatal:  # every rent would fail the same way: rent nothing more, now
            self.stop_reason = event.reason
            if self.stop_on_fatal:
                self._cancelled = True
                self._look.update(self._servers)
            else:  # rent nothing in this decision: the caller's hold says until when
                self._hold_until = math.inf
            return
        want = self._waiting.get(job_id) if job_id is not None else None
        if job_id is None or want is None:
            return  # rented ahead: the job rents again once it is ready
        if event.job_cannot_run:
            self._fail(job_id, want, FailureKind.UNAVAILABLE, event.reason)
            return
        record = self._jobs[job_id]
        record.rent_failures = tried = (*record.rent_failures, event.reason)
        if len(tried) >= MAX_OFFERS_PER_ATTEMPT:
            message = f"{MAX_OFFERS_PER_ATTEMPT} offers failed to start; last: {event.reason}"
            self._fail(job_id, want, FailureKind.PROVISIONING_FAILED, message)

    def _fail(self, job_id: str, want: _Known, kind: FailureKind, message: str) -> None:
        del self._waiting[job_id]
        self._unclaim(job_id)
        self.unplaceable.append(Unplaceable(job_id, want.attempt, kind, message))


def _held_needs_of(record: Ranked) -> tuple[str, ...]:
    assert isinstance(record, _Known)
    return record.needs


def _held_needs(job: Job, fresh: Mapping[str, Job]) -> tuple[str, ...]:
    """The job's needs among `fresh`: usually all of them, and then its own tuple."""
    for need in job.needs:
        if need not in fresh:
            return tuple(n for n in job.needs if n in fresh)
    return job.needs


def _rented_for(server: _Server) -> str | None:
    return server.rented_for if server.rented_for == server.claim else None


def _by_id(server: _Server) -> int:
    return server.id


def _label(quote: Quote) -> str:
    gpus = quote.gpu_model if quote.gpu_count <= 1 else f"{quote.gpu_count}x {quote.gpu_model}"
    return f"{gpus or 'server'} #{quote.host}"
