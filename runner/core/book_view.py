"""What a server book shows, pure: one read-only view over its parts.

`ServerBook` (servers.py) extends this view as `MutableMapping` extends `Mapping`: the book is
what the core tells and asks for decisions, the view is every figure a reader takes from it
(the driver, serve's pages, a simulator's checks, `runner start`). A reader typed with
`BookView` can change nothing. Each figure is read from the part that holds it: the servers
from the fleet, the waiting jobs from the known jobs, the money from the budget, idle money
from warmth, what a waiting job's server does from the renter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.core.book_part import BookState
from runner.core.budget import Budget
from runner.core.fleet import AFTER_SCRIPT_S, EPS_S, Fleet, ServerView
from runner.core.idle_money import IdleFigure, IdleMoney
from runner.core.known_jobs import KnownJobs, Unplaceable, WaitReason
from runner.core.model import GpuAsk
from runner.core.rentals import Quote
from runner.core.renting import Renter
from runner.core.warmth import Warmth


class BookView:
    """The figures of a server book, read-only."""

    def __init__(self, state: BookState, renter: Renter, warmth: Warmth) -> None:
        self.cap = state.cap
        self.budget: Budget = state.budget  # the only place money is reserved
        self._fleet: Fleet = state.fleet
        self._jobs: KnownJobs = state.jobs
        self._renting = state.renting
        self._renter = renter
        self._warmth = warmth
        # Something the book was told since its last decision (the book sets it).
        self._dirty = True
        self.stop_reason: str | None = None  # why a fatal rent failure stopped the renting

    # -- the book's state ------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return self._dirty  # told something since its last decision

    @property
    def renting(self) -> bool:
        return self._renting  # False: it holds only servers that already exist

    @property
    def ranks(self) -> Mapping[str, float]:
        """The scheduler of the same run orders its ready jobs by these: it takes them here."""
        return self._jobs.ranks

    @property
    def expected_boot_s(self) -> float:
        return self._fleet.boot.expected_s

    def offered(self, gpu: str) -> bool:
        """Does any offer on the market fit a job asking for `gpu` (a pool's GPU type)?"""
        return self._jobs.market.best(GpuAsk(type=gpu), frozenset()) is not None

    # -- money -----------------------------------------------------------------------------

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

    def idle_money(self) -> IdleMoney:
        """Idle time of rented servers, USD and seconds, by UTC day and GPU type."""
        return self._warmth.money

    def idle_figures(self, now: float) -> dict[tuple[int, str], IdleFigure]:
        """Idle money (USD, seconds) by (UTC day, GPU model), the stretches going on too."""
        return self._warmth.idle_figures(now)

    def idle_today_usd(self, now: float) -> float:
        return self._warmth.idle_today_usd(now)

    # -- servers ---------------------------------------------------------------------------

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
    def running_count(self) -> int:
        return len(self._fleet.on)  # at most the cap

    # -- jobs ------------------------------------------------------------------------------

    @property
    def jobs_known(self) -> int:
        return len(self._jobs.records)  # unsettled, and settled ones a dependent still needs

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

    @property
    def unplaceable(self) -> Sequence[Unplaceable]:
        """Attempts the book could not give a server, until the caller takes them."""
        return self._jobs.unplaceable

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
