"""Budget pools: one budget (total, or per UTC day) and one cap of servers, shared by every run
and `serve` instance that joins the pool, wherever it runs.

The words:
- a *lease* is a holder's claim (a run, a serve instance) to its reservations; it carries a
  fencing token and lives while its holder heartbeats it (every ttl/3);
- a *reservation* is one rental's worst case (money and one server), taken before the rental;
  it counts against the pool until it is *settled* with what was billed;
- a *reaper* takes an expired lease with a new token, cancels what its holder left, settles.
A holder whose lease was taken is *fenced*: its heartbeat, settle and new reservation are refused
(LeaseLost), so it stops renting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from runner.errors import InfrastructureError, RunMustStop, UsageError

POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class PoolError(InfrastructureError):
    """The pool database cannot be reached, read or written."""


class UnknownPool(UsageError):
    """No pool of that name."""


class LeaseLost(RunMustStop):
    """This holder's lease was taken over (it was presumed dead): stop renting, give back."""


@dataclass(frozen=True)
class PoolSettings:
    name: str
    budget_usd: float
    per_day: bool  # the budget is per UTC day (on the database's clock), not a total
    max_servers: int


@dataclass(frozen=True)
class PoolUsage:
    """A pool as its rows have it now (the database's clock)."""

    settings: PoolSettings
    reserved_usd: float  # worst cases of the unsettled reservations
    billed_usd: float  # settled reservations in the window (today, or ever)
    servers: int  # unsettled reservations: servers that may bill
    holders: int  # leases alive (not done)
    expired_holders: int  # of which expired and not yet reaped

    @property
    def committed_usd(self) -> float:
        return self.reserved_usd + self.billed_usd

    @property
    def free_usd(self) -> float:
        return self.settings.budget_usd - self.committed_usd


@dataclass(frozen=True)
class Lease:
    holder: str
    pool: str
    token: int  # fencing token: a takeover gives the lease a new one
    ttl_s: float


@dataclass(frozen=True)
class HeldLease:
    """A lease that has not expired, as a reaper sees it."""

    holder: str
    pool: str
    owner: str | None  # the holding process (runner/liveness.py Holder.text), if recorded
    expires_in_s: float  # on the database's clock
    ttl_s: float
    unsettled: int  # reservations not settled: servers that may bill


@dataclass(frozen=True)
class Reservation:
    id: int
    pool: str
    holder: str
    amount_usd: float
    rental_id: int | None
    label: str
    settled: bool
    billed_usd: float | None


@dataclass(frozen=True)
class Refusal:
    """A reservation that does not fit now; `why` says which limit."""

    usage: PoolUsage
    amount_usd: float
    why: str
    ever: bool  # it can never fit (more than the whole budget), waiting is pointless


@dataclass(frozen=True)
class PoolEvent:
    """One change to a pool, numbered under the pool's row lock (`seq` is the commit order)."""

    seq: int
    kind: Literal["reserve", "grow", "settle"]
    reservation: int
    amount_usd: float  # reserved, added, or billed
    reserved_usd: float  # what the reservation holds after a reserve or grow, had at a settle


def check_name(name: str) -> str:
    if not POOL_NAME.match(name):
        raise UsageError(
            f"pool name {name!r} is not valid",
            hint="use letters, digits, '.', '_' or '-' (at most 63), starting with a letter or "
            "digit",
        )
    return name


def check_settings(budget_usd: float, max_servers: int) -> None:
    if not budget_usd > 0 or budget_usd != budget_usd or budget_usd == float("inf"):
        raise UsageError(f"--budget {budget_usd}: must be a positive amount in USD")
    if max_servers < 1:
        raise UsageError(f"--max-servers {max_servers}: must be at least 1")


def refusal(usage: PoolUsage, amount_usd: float) -> Refusal | None:
    """Why a reservation of `amount_usd` does not fit `usage`, or None when it does."""
    s = usage.settings
    if amount_usd > s.budget_usd:
        window = "a day's" if s.per_day else "the whole"
        why = (
            f"${amount_usd:.2f} is more than {window} budget of pool {s.name} (${s.budget_usd:.2f})"
        )
        return Refusal(usage, amount_usd, why, ever=True)
    if usage.servers + 1 > s.max_servers:
        why = f"pool {s.name} holds {usage.servers} of its {s.max_servers} servers"
        return Refusal(usage, amount_usd, why, ever=False)
    if usage.committed_usd + amount_usd > s.budget_usd + 1e-9:
        spent = "today" if s.per_day else "in total"
        why = (
            f"pool {s.name}: ${usage.billed_usd:.2f} billed {spent} + ${usage.reserved_usd:.2f} "
            f"reserved + ${amount_usd:.2f} asked > ${s.budget_usd:.2f}"
        )
        # Nothing left to free: only a new day (per-day pools) makes room.
        ever = usage.servers == 0 and not s.per_day
        return Refusal(usage, amount_usd, why, ever=ever)
    return None
