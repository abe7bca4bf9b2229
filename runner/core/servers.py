"""The servers a run holds, and every decision about them, pure: the book the rest of the
code uses, made of parts that each own one idea.

The book is told which jobs are ready (`want`), which attempts ended and which jobs are final,
and what became of each server; after each batch `decide(now)` answers with commands: rent a
server (a budget reservation is made first), start a job on one, give one back. The parts:

- known_jobs.py: the jobs it holds and the ranked queue of those waiting for a server;
- fleet.py: the servers held and the life of each (booting, idle, busy, releasing, gone),
  with who each is meant for; budget.py: the money each reserves;
- placement.py: which waiting job a ready server runs;
- renting.py: renting for ready jobs; ends.py and ahead.py: expected ends and renting ahead
  of need; hedging.py: a second host beside a slow boot;
- giving_back.py: which idle server to keep, and for how long.

Servers that already exist (SSH hosts, local slots) are the same model, never rented or given
back before the end. Nothing here reads a clock, does I/O or recurses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from runner.core.ahead import RentAhead
from runner.core.book_part import BookState
from runner.core.budget import Budget
from runner.core.ends import Ends
from runner.core.events import BookTimer, BookWake, SetTimer, TimerToken
from runner.core.fleet import AFTER_SCRIPT_S, EPS_S, Fleet, ServerView
from runner.core.giving_back import GiveBack
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hedging import HEDGE_AGAIN_S, Hedger
from runner.core.idle_money import IdleFigure, IdleMoney
from runner.core.known_jobs import KnownJobs, Unplaceable, WaitReason
from runner.core.model import GpuAsk, Job
from runner.core.placement import Placement
from runner.core.pulls import Pulls
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Market,
    NoMarket,
    Provisioning,
    Quote,
    RentFailed,
    ServerDeploying,
    ServerEvent,
    ServerLost,
    ServerReady,
    ServerReleased,
)
from runner.core.renting import MAX_OFFERS_PER_ATTEMPT, Renter
from runner.core.warm_policy import WarmPolicy
from runner.core.warmth import Warmth

__all__ = [
    "AFTER_SCRIPT_S",
    "HEDGE_AGAIN_S",
    "MAX_OFFERS_PER_ATTEMPT",
    "ServerBook",
    "ServerView",
    "Unplaceable",
]


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
        self._renting = renting = market is not None
        self._out: list[CoreCommand] = []  # every part adds its commands here
        out = self._out
        self._jobs = jobs_ = KnownJobs(market or NoMarket(), durations_s)
        self._fleet = fleet = Fleet(self.budget, out, boot or BootTimes())
        state = BookState(fleet, jobs_, self.budget, out, cap, renting)
        self._ends = ends = Ends(state, provisioning)
        fleet.on_free = ends.wake_starved  # a server given back opens a slot under the cap
        self._hedger = hedger = Hedger(state, hedge)
        self._placer = Placement(state, ends, hedger)
        self._renter = renter = Renter(state, ends, hedger)
        self._ahead = RentAhead(state, ends, renter)
        self._warmth = warmth = Warmth(state)
        fleet.on_idle_end = warmth.idle_ended
        self._giver = GiveBack(state, ends, warmth)
        self._cancelled = False
        # Something the book was told since its last decision: without it a decision would
        # decide nothing new (most events are the scheduler's own: a placed attempt, a
        # timeout timer of an attempt that already ended), and is skipped.
        self._dirty = True
        self.stop_reason: str | None = None
        self._hold_until = -math.inf  # place and rent nothing before this (serve's holds)
        # A fatal rent failure cancels the run; a queue server holds its starts instead.
        self.stop_on_fatal = True
        for quote in fixed_hosts:
            fleet.add_fixed(quote, now)
        self.add_jobs(jobs, now)

    # -- what the book is told -------------------------------------------------------------

    def add_jobs(self, jobs: Sequence[Job], now: float) -> None:
        """Jobs that may want a server from now on (serve adds them as they are submitted).
        A need the book does not hold is settled already. A job's rank counts its dependents
        in the book: a later batch raises the ranks of the jobs it needs."""
        self._dirty = True
        for job_id in self._jobs.add(jobs):
            self._ends.needs_known(job_id, now)

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
            self._out.append(SetTimer(until, BookTimer(BookWake.HOLD, 0)))

    def want(self, job_id: str, attempt: int, timeout_s: float, now: float) -> None:
        """The job is ready for attempt `attempt` and needs a server."""
        self._dirty = True
        self._jobs.want(job_id, attempt, timeout_s, now)
        self._ends.ready(job_id)

    def drop(self, job_id: str) -> int | None:
        """The job no longer wants a server (killed while waiting): the number of the attempt
        that waited. None: it is not waiting (it runs on a server, or is not known)."""
        self._dirty = True
        want = self._jobs.waiting.pop(job_id, None)
        if want is None:
            return None
        self._fleet.unclaim(job_id)
        return want.attempt

    def attempt_ended(self, job_id: str, now: float, server_failed: bool = False) -> None:
        """The job's attempt ended: its server is free. `server_failed`: it ended because its
        server failed under it; a rented server not reported lost after that was won back
        for the job (a spot order outbid, its bid raised) and is kept for the job's retry."""
        self._dirty = True
        self._jobs.retrying.add(job_id)
        server = self._fleet.job_ended(job_id, now)
        if server is None:
            return
        if server_failed and server.rented:
            self._fleet.keep_for(job_id, server)
        self._ends.wake_starved()

    def requeued(self, job_id: str, at: float) -> None:
        """The job's next attempt is due at `at` (a retry's backoff)."""
        self._jobs.retry_at[job_id] = at

    def settled(self, job_id: str, now: float) -> None:
        """The job is final: it wants nothing more."""
        self._dirty = True
        record = self._jobs.settle(job_id)
        self._ends.drop(job_id)
        if job_id in self._fleet.claims:
            self._fleet.unclaim(job_id)
        if self._renting:  # only renting plans with expected ends
            self._ends.set_end(job_id, now, now, now)
        if record is not None:
            self._jobs.forget_settled(job_id, record)

    def cancel(self, now: float) -> None:
        """Rent nothing more; give back every server no job runs on."""
        self._dirty = True
        self._cancelled = True
        self._fleet.look.update(self._fleet.servers)

    def finish(self, now: float) -> list[CoreCommand]:
        """The run is over: give everything back."""
        for server in list(self._fleet.servers.values()):
            self._fleet.release(server, now, "the run is over")
        return self._flush()

    def handle(self, event: ServerEvent, now: float) -> None:
        self._dirty = True
        fleet = self._fleet
        server = fleet.servers.get(event.server)
        if isinstance(event, ServerReleased):
            fleet.released(event.server, event.cost_usd)
        elif server is None:
            return  # already given back: a late report
        elif isinstance(event, ServerReady):
            fleet.ready(server, now)
            if server.id in fleet.pairs:
                self._hedger.won(server, now)
        elif isinstance(event, ServerDeploying):
            self._hedger.deploying(server, now)
        elif isinstance(event, ServerLost):
            fleet.lost(server, now, event.reason)
        elif isinstance(event, RentFailed):
            fleet.rent_failed(server, event, now)
            if event.fatal:  # every rent would fail the same way: rent nothing more, now
                self._stop(event.reason)
            else:
                self._renter.rent_failed(server, event)

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        if self.stop_on_fatal:
            self._cancelled = True
            self._fleet.look.update(self._fleet.servers)
        else:  # rent nothing in this decision: the caller's hold says until when
            self._hold_until = math.inf

    def timer(self, token: TimerToken, now: float) -> None:
        """A timer this book asked for came due."""
        self._dirty = True
        if not isinstance(token, BookTimer):
            return
        what, of = token.what, token.of
        if what is BookWake.AHEAD and of in self._ends.eta:
            self._ends.due[str(of)] = None
        elif what is BookWake.LOOK and isinstance(of, int) and of in self._fleet.servers:
            self._fleet.look.add(of)
        elif what is BookWake.HEDGE and isinstance(of, int) and of in self._fleet.servers:
            self._fleet.to_hedge.append(of)
        elif what is BookWake.WARM and isinstance(of, int):
            self._warmth.woken(of)  # a window opened or closed, or a new day's idle budget

    # -- deciding --------------------------------------------------------------------------

    def decide(self, now: float) -> list[CoreCommand]:
        """Everything to do now, after the events so far."""
        if not self._dirty:
            return self._flush()
        jobs, fleet, ends = self._jobs, self._fleet, self._ends
        if jobs.why:
            jobs.why.clear()  # each decision says afresh what a job waits for
        self.budget.new_day_if_due(now)
        fleet.excluded.forgive(now)
        held_back = now < self._hold_until
        place = self._placer.place
        while True:
            if not held_back:
                place(now)
            if not self._cancelled and self._renting and not held_back:
                self._renter.rent_for_waiting(now)
                if fleet.to_hedge:
                    self._hedger.hedge_due(now)
                # Each pass can give jobs an expected end, making their dependents due.
                while ends.due:
                    self._ahead.rent_ahead(now)
                    place(now)
            held = len(fleet.servers)
            self._giver.give_back(now, self._cancelled)
            if not self._cancelled and self._renting and not held_back:
                # After every ready job had its turn, and after the give-back: a warm server
                # given back (its order's end near) is replaced in the same decision.
                self._warmth.top_up(now)
            # A server given back frees a slot and money: a waiting job may rent now.
            if len(fleet.servers) == held or not jobs.waiting or self._cancelled:
                self._dirty = bool(ends.due or fleet.look)
                return self._flush()

    def _flush(self) -> list[CoreCommand]:
        out = self._out[:]
        self._out.clear()
        return out

    @property
    def warmth(self) -> WarmPolicy:
        """What a queue keeps warm (serve's --keep-warm, --warm, --idle-budget)."""
        return self._warmth.policy

    @warmth.setter
    def warmth(self, policy: WarmPolicy) -> None:
        self._warmth.policy = policy
        self._dirty = True

    def offered(self, gpu: str) -> bool:
        """Does any offer on the market fit a job asking for `gpu` (a pool's GPU type)?"""
        return self._jobs.market.best(GpuAsk(type=gpu), frozenset()) is not None

    def idle_money(self) -> IdleMoney:
        """Idle time of rented servers, USD and seconds, by UTC day and GPU type."""
        return self._warmth.money

    def idle_figures(self, now: float) -> dict[tuple[int, str], IdleFigure]:
        """Idle money (USD, seconds) by (UTC day, GPU model), the stretches going on too."""
        return self._warmth.idle_figures(now)

    def idle_today_usd(self, now: float) -> float:
        return self._warmth.idle_today_usd(now)

    # -- reading (delegated to the part that holds each figure) ------------------------------

    @property
    def boot(self) -> BootTimes:
        """The boot times the book plans with, learned from each boot seen."""
        return self._fleet.boot

    @boot.setter
    def boot(self, boot: BootTimes) -> None:
        self._fleet.boot = boot

    @property
    def pulls(self) -> Pulls:
        """What the host history says of each image's pulls (hedging a deploy reads it)."""
        return self._hedger.pulls

    @pulls.setter
    def pulls(self, pulls: Pulls) -> None:
        self._hedger.pulls = pulls

    @property
    def hedge(self) -> HedgePolicy:
        return self._hedger.policy

    @hedge.setter
    def hedge(self, policy: HedgePolicy) -> None:
        self._hedger.policy = policy

    @property
    def forgive_after_s(self) -> float | None:
        """A queue server tries a failed host again after this long (None: never, in a run)."""
        return self._fleet.excluded.forgive_after_s

    @forgive_after_s.setter
    def forgive_after_s(self, seconds: float | None) -> None:
        self._fleet.excluded.forgive_after_s = seconds

    @property
    def ranks(self) -> dict[str, float]:
        """The scheduler of the same run orders its ready jobs by these: it takes them here."""
        return self._jobs.ranks

    @property
    def unplaceable(self) -> list[Unplaceable]:
        """Attempts the book could not give a server, until the caller takes them."""
        return self._jobs.unplaceable

    @unplaceable.setter
    def unplaceable(self, failed: list[Unplaceable]) -> None:
        self._jobs.unplaceable = failed

    @property
    def budget_usd(self) -> float | None:
        return self.budget.limit_usd

    @property
    def spent_usd(self) -> float:
        return self.budget.spent_usd  # the servers given back (and failed rents)

    def cost_usd(self, now: float) -> float:
        return self.budget.cost_usd(now)  # spent, and what the servers held cost so far

    def committed_usd(self, now: float) -> float:
        return self.budget.committed_usd(now)  # spent, and every reservation (or cost so far)

    def servers(self) -> list[ServerView]:
        return self._fleet.views()

    def idle_servers(self) -> list[ServerView]:
        return self._fleet.idle_views()  # up and running nothing

    @property
    def held(self) -> int:
        return len(self._fleet.servers)  # booting, idle or busy

    @property
    def in_use(self) -> int:
        """Servers that count as held for a person: every rented one (booting, idle or busy:
        each is billed) and each that already exists while a job runs on it (an idle one
        costs nothing and is no one's). Two ints, so another thread may read it."""
        return len(self._fleet.rented) + self._fleet.fixed_busy

    @property
    def idle_count(self) -> int:
        return len(self._fleet.idle)

    @property
    def jobs_known(self) -> int:
        return len(self._jobs.records)  # unsettled, and settled ones a dependent still needs

    @property
    def running_count(self) -> int:
        return len(self._fleet.on)  # at most the cap

    @property
    def waiting_count(self) -> int:
        return len(self._jobs.waiting)

    def waiting(self) -> list[str]:
        return list(self._jobs.waiting)  # ready, with no server yet

    def wait_reason(self, job_id: str) -> WaitReason | None:
        """What a waiting job waits for, if decided."""
        return self._jobs.why.get(job_id) if job_id in self._jobs.waiting else None

    def server_wait(self, job_id: str) -> str | None:
        """What a waiting job's server is doing, for a person (None: the job is not waiting)."""
        return self._renter.server_wait(job_id)

    def fits(self, quote: Quote, job_id: str) -> bool:
        return self._jobs.fits(quote, job_id)

    def holds(self, view: ServerView, job_id: str, now: float) -> bool:
        """Could the waiting job start on `view` now: it fits, and its worst case there ends
        before the server's maximum rental length does."""
        if not self._jobs.fits(view.quote, job_id):
            return False
        want = self._jobs.waiting.get(job_id)
        longest = 0.0 if want is None else want.timeout_s + AFTER_SCRIPT_S
        return view.ends_at is None or now + longest <= view.ends_at + EPS_S

    @property
    def dirty(self) -> bool:
        return self._dirty  # told something since its last decision

    @property
    def renting(self) -> bool:
        return self._renting  # False: it holds only servers that already exist

    @property
    def expected_boot_s(self) -> float:
        return self._fleet.boot.expected_s
