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
  of need; hedging.py: a second host beside a slow boot (races.py: who races whom);
- giving_back.py: which idle server to keep, and for how long; warmth.py: keeping warm.

Each part owns its collections: the others read them typed read-only and change them through
its methods (book_part.py wires them). What the book shows is its read-only view,
book_view.py; what a backend offers to build one from is book_offer.py.

Servers that already exist (SSH hosts, local slots) are the same model, never rented or given
back before the end. Nothing here reads a clock, does I/O or recurses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from runner.core.ahead import RentAhead
from runner.core.book_offer import BookOffer
from runner.core.book_part import BookState
from runner.core.book_view import BookView
from runner.core.budget import Budget
from runner.core.ends import Ends
from runner.core.events import BookTimer, BookWake, SetTimer, TimerToken
from runner.core.fleet import AFTER_SCRIPT_S, Fleet, ServerView
from runner.core.giving_back import GiveBack
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hedging import HEDGE_AGAIN_S, Hedger
from runner.core.known_jobs import KnownJobs, Unplaceable
from runner.core.model import Job
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


class ServerBook(BookView):
    """Decides which servers a run holds and which job runs on which; what it shows is its
    view's (book_view.py)."""

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
        self.provisioning = provisioning
        budget = Budget(budget_usd)
        self._out: list[CoreCommand] = []  # every part adds its commands here
        out = self._out
        jobs_ = KnownJobs(market or NoMarket(), durations_s)
        fleet = Fleet(budget, out, boot or BootTimes())
        state = BookState(fleet, jobs_, budget, out, cap, market is not None)
        self._ends = ends = Ends(state, provisioning)
        fleet.on_free = ends.wake_starved  # a server given back opens a slot under the cap
        self._hedger = hedger = Hedger(state, hedge)
        self._placer = Placement(state, ends, hedger)
        self._renter = renter = Renter(state, ends, hedger)
        self._ahead = RentAhead(state, ends, renter)
        warmth = Warmth(state)
        fleet.on_idle_end = warmth.idle_ended
        self._giver = GiveBack(state, ends, warmth)
        super().__init__(state, renter, warmth)
        self._cancelled = False
        # The view's `dirty`: without something told since the last decision, a decision
        # would decide nothing new (most events are the scheduler's own: a placed attempt, a
        # timeout timer of an attempt that already ended), and is skipped.
        self._hold_until = -math.inf  # place and rent nothing before this (serve's holds)
        # A fatal rent failure cancels the run; a queue server holds its starts instead.
        self.stop_on_fatal = True
        for quote in fixed_hosts:
            fleet.add_fixed(quote, now)
        self.add_jobs(jobs, now)

    @classmethod
    def from_offer(
        cls,
        jobs: Sequence[Job],
        cap: int,
        offer: BookOffer,
        *,
        budget_usd: float | None = None,
        provisioning: Provisioning = Provisioning.AHEAD,
        durations_s: Mapping[str, float] | None = None,
        now: float = 0.0,
    ) -> ServerBook:
        """The book of a run (or a queue) over what a backend offers (book_offer.py)."""
        book = cls(
            jobs,
            cap,
            market=offer.market,
            budget_usd=budget_usd,
            provisioning=provisioning,
            fixed_hosts=offer.fixed_hosts,
            boot=offer.boot,
            durations_s=durations_s,
            now=now,
            hedge=offer.hedge,
        )
        book.pulls = offer.pulls
        return book

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
        want = self._jobs.unwant(job_id)
        if want is None:
            return None
        self._fleet.unclaim(job_id)
        return want.attempt

    def attempt_ended(self, job_id: str, now: float, server_failed: bool = False) -> None:
        """The job's attempt ended: its server is free. `server_failed`: it ended because its
        server failed under it; a rented server not reported lost after that was won back
        for the job (a spot order outbid, its bid raised) and is kept for the job's retry."""
        self._dirty = True
        self._jobs.attempt_ended(job_id)
        server = self._fleet.job_ended(job_id, now)
        if server is None:
            return
        if server_failed and server.rented:
            self._fleet.keep_for(job_id, server)
        self._ends.wake_starved()

    def requeued(self, job_id: str, at: float) -> None:
        """The job's next attempt is due at `at` (a retry's backoff)."""
        self._jobs.retry_due(job_id, at)

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
        self._fleet.look_at_all()

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
            self._fleet.look_at_all()
        else:  # rent nothing in this decision: the caller's hold says until when
            self._hold_until = math.inf

    def timer(self, token: TimerToken, now: float) -> None:
        """A timer this book asked for came due."""
        self._dirty = True
        if not isinstance(token, BookTimer):
            return
        what, of = token.what, token.of
        if what is BookWake.AHEAD and isinstance(of, str):
            self._ends.timer_due(of)
        elif what is BookWake.LOOK and isinstance(of, int) and of in self._fleet.servers:
            self._fleet.look_at(of)
        elif what is BookWake.HEDGE and isinstance(of, int) and of in self._fleet.servers:
            self._hedger.look_soon(of)
        elif what is BookWake.WARM and isinstance(of, int):
            self._warmth.woken(of)  # a window opened or closed, or a new day's idle budget

    # -- deciding --------------------------------------------------------------------------

    def decide(self, now: float) -> list[CoreCommand]:
        """Everything to do now, after the events so far."""
        if not self._dirty:
            return self._flush()
        jobs, fleet, ends = self._jobs, self._fleet, self._ends
        jobs.new_decision()  # each decision says afresh what a job waits for
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

    # -- settings --------------------------------------------------------------------------

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

    def take_unplaceable(self) -> list[Unplaceable]:
        """The attempts the book could not give a server since the last take."""
        return self._jobs.take_unplaceable()
