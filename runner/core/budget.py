"""The run's money: the one place a rental's cost is reserved, pure.

Before a rental is asked for, its worst case (the longest it can be held, at the price with
the renter's fee, plus the creation fee whenever the order could live long enough to be
charged it) must fit beside what was spent and what every server held has reserved; a job
that keeps a server longer extends that server's reservation first. A server given back counts
what it cost so far until the adapter's own figure replaces that (`settle`).

A budget that renews each UTC day (serve's daily limit) forgets what earlier days spent; what
the servers still held cost counts whole, from their create. A shared pool's reservation is
the adapter's (its database is I/O): it answers a rent it cannot cover with a failed rent that
says so, and this budget sees only the run's own.

Prices are USD per hour with the renter's fee already on them; times are seconds passed in by
the caller. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.money import usd_text
from runner.core.rentals import Quote

DAY_S = 86_400
_SLACK_USD = 1e-9  # float noise: a worst case equal to what is left fits


@dataclass(slots=True)
class _Hold:
    """A rental's money: what it is rented at, since when, and how far it is reserved."""

    quote: Quote
    since: float
    reserved_until: float

    def cost_so_far(self, now: float) -> float:
        q = self.quote
        return q.cost_usd(now - self.since)

    def committed(self, now: float) -> float:
        q = self.quote
        reserved = q.cost_usd(self.reserved_until - self.since)
        return max(reserved, self.cost_so_far(now))


class Budget:
    """What a run may spend (None: no limit), what it spent, and what its rentals reserve."""

    def __init__(self, limit_usd: float | None = None) -> None:
        self._limit_usd = limit_usd
        self._spent_usd = 0.0
        self._holds: dict[int, _Hold] = {}
        # Given back, its final figure not heard yet: quote, cost counted (a queue server runs
        # for months: each goes once its ServerReleased settles it).
        self._booked: dict[int, tuple[Quote, float]] = {}
        self._day: int | None = None  # the UTC day a daily budget is for (None: not daily)

    # -- reading ---------------------------------------------------------------------------

    @property
    def limit_usd(self) -> float | None:
        """What the run (or, daily, the day) may spend; None: no limit."""
        return self._limit_usd

    @property
    def spent_usd(self) -> float:
        """Spent: the rentals given back (estimates until settled) and failed rents."""
        return self._spent_usd

    @property
    def day(self) -> int | None:
        """The UTC day a daily budget is for (None: not a daily budget)."""
        return self._day

    def cost_usd(self, now: float) -> float:
        """Spent, plus what the servers held have cost so far."""
        return self._spent_usd + sum(h.cost_so_far(now) for h in self._holds.values())

    def committed_usd(self, now: float) -> float:
        """Spent, plus the reservation (or the cost so far, if more) of every server held."""
        return self._spent_usd + sum(h.committed(now) for h in self._holds.values())

    def over(self, extra_usd: float, now: float) -> float:
        """How far `extra_usd` more would go over the limit (<= 0: it fits)."""
        if self._limit_usd is None:
            return 0.0
        return self.committed_usd(now) + extra_usd - self._limit_usd - _SLACK_USD

    def over_a_day(self, cost_usd: float) -> float:
        """How far one rental's worst case is over a whole day's budget (<= 0: a new day
        can hold it)."""
        assert self._limit_usd is not None
        return cost_usd - self._limit_usd - _SLACK_USD

    def cost_so_far(self, server: int, now: float) -> float:
        hold = self._holds.get(server)
        return hold.cost_so_far(now) if hold is not None else 0.0

    # -- reserving -------------------------------------------------------------------------

    def reserve(self, server: int, quote: Quote, now: float, until: float) -> None:
        """Hold money for a new rental up to `until` (the caller checked it fits)."""
        self._holds[server] = _Hold(quote, now, until)

    def extend(self, server: int, until: float, now: float) -> bool:
        """Reserve money for holding `server` up to `until`; False if the limit cannot."""
        hold = self._holds[server]
        if until <= hold.reserved_until:
            return True
        q = hold.quote
        before = hold.committed(now)
        after = q.cost_usd(until - hold.since)
        if self.over(max(0.0, after - before), now) > 0:
            return False
        hold.reserved_until = until
        return True

    def given_back(self, server: int, now: float) -> float:
        """The rental is given back: what it cost so far counts as spent, until `settle`."""
        hold = self._holds.pop(server)
        cost = hold.cost_so_far(now)
        self._booked[server] = (hold.quote, cost)
        self._spent_usd += cost
        return cost

    def rent_failed(self, server: int, cost_usd: float) -> None:
        """The rent failed: nothing is held, and what the failed order cost (the adapter's own
        figure) is spent, with nothing to settle later."""
        self._holds.pop(server, None)
        self._spent_usd += cost_usd

    def settle(self, server: int, final_usd: float | None) -> None:
        """The adapter's own figure for a rental given back replaces the estimate counted (no
        figure: the estimate stays)."""
        booked = self._booked.pop(server, None)
        if booked is not None and final_usd is not None:
            self._spent_usd += final_usd - booked[1]

    # -- a budget per day ------------------------------------------------------------------

    def per_day(self, limit_usd: float, spent_today_usd: float, now: float) -> None:
        """The limit renews each UTC day: `limit_usd` a day, `spent_today_usd` of it gone."""
        self._limit_usd = limit_usd
        self._day = day_of(now)
        self._spent_usd = spent_today_usd

    def new_day_if_due(self, now: float) -> bool:
        """A daily budget renews once `now` is in a later day: what earlier days spent no
        longer counts (what the servers held cost counts whole, from their create)."""
        if self._day is None or day_of(now) <= self._day:
            return False
        self._day = day_of(now)
        self._spent_usd = 0.0
        self._booked.clear()  # a late figure for an earlier day's order does not count either
        return True

    # -- words -----------------------------------------------------------------------------

    def refusal(
        self, quote: Quote, hold_s: float, cost_usd: float, over_usd: float, now: float
    ) -> str:
        """Why a rental's worst case does not fit, in the units a person checks."""
        fee = f" with the {quote.fee_rate * 100:g} % renter fee" if quote.fee_rate else ""
        charged = hold_s >= quote.creation_fee_after_s
        creation = quote.creation_fee_usd if charged else 0.0
        return (
            f"budget {usd_text(self._limit_usd or 0)} would be exceeded by {usd_text(over_usd)}: "
            f"committed {usd_text(self.committed_usd(now))} + this rental's worst case "
            f"{usd_text(cost_usd)} (${quote.usd_per_hour:.4f}/h{fee} x {hold_s / 3600:.2f} h: "
            f"start-up, the job's timeout and fetching its files"
            f"{f', + {usd_text(creation)} creation fee' if creation else ''})"
        )


def day_of(now: float) -> int:
    """The UTC day `now` falls in (days since 1970-01-01; Unix time has no leap seconds)."""
    return int(now // DAY_S)
