"""A rental's maximum length, pure: a host that cannot hold a job is no fit for it.

A marketplace host may cap how long one order lives (Clore's `mrl`, "maximum rental length";
its clients compute the end as the order's creation plus it). An order that reaches that end
is ended by the market, whatever runs on it. So an offer is rented for a job only when its
maximum length holds the job's worst case, the very hold the budget reserves (the longest
boot, the job's timeout, the time to fetch its files); and a server already held is given a
job only when the job's worst case ends before the server's own end. The server's end is
counted from when the create was sent (`Server.since`), which is no later than the market's
creation stamp: the cautious side.

A retry the server could serve is not reserved at the rent: each attempt's own worst case is
checked against what is left of the server when it is to start there, and an attempt that
does not fit rents elsewhere. Reserving every retry up front would pass over hosts that hold
the likely case (one attempt) for the sake of an unlikely one.

Times are seconds passed in by the caller; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Set

from runner.core.fleet import AFTER_SCRIPT_S, EPS_S, Server
from runner.core.model import GpuAsk, Job
from runner.core.rentals import BootTimes, Market, Quote


def boot_allowance_s(boot: BootTimes, job: Job) -> float:
    """The boot a rental for `job` is budgeted for: the book's bound for the job's own image
    (its pull, never another job's), or the job's own bound where longer."""
    return _own_bound_or(boot.allowance_for(job.image), job)


def job_hold_s(boot: BootTimes, job: Job, timeout_s: float | None = None) -> float:
    """`worst_hold_s` with the book's boot bound for `job`'s image: what the core reserves
    for a rent and holds an offer's maximum rental length to."""
    return worst_hold_s(boot.allowance_for(job.image), job, timeout_s)


def worst_hold_s(allowance_s: float, job: Job, timeout_s: float | None = None) -> float:
    """The longest a server rented for one attempt of `job` is held: its boot at the longest
    (`allowance_s`: the bound for the job's image), the attempt's timeout, and fetching its
    files after. The budget reserves it, an offer's maximum rental length must hold it, and
    `plan`'s "at most" is priced over it."""
    attempt_s = job.timeout_s if timeout_s is None else timeout_s
    return hold_for_s(_own_bound_or(allowance_s, job), attempt_s)


def _own_bound_or(allowance_s: float, job: Job) -> float:
    """The job's own `boot-timeout-minutes` where longer than the bound (the adapter waits
    that long for it). A shorter one still counts the bound: it leaves room for the SSH
    probe after the server is online, which the job's figure does not bound."""
    return max(allowance_s, job.boot_timeout_s or 0.0)


def hold_for_s(boot_s: float, timeout_s: float) -> float:
    """A boot of `boot_s` at the longest, a script's `timeout_s`, then fetching its files."""
    return boot_s + timeout_s + AFTER_SCRIPT_S


def holds(quote: Quote, hold_s: float) -> bool:
    """Can a rental of `quote` be held `hold_s` (no maximum known: yes)?"""
    return quote.max_rental_s is None or hold_s <= quote.max_rental_s + EPS_S


def ends_at(server: Server) -> float | None:
    """When the market ends `server`'s order at the latest (None: no maximum known)."""
    longest = server.quote.max_rental_s
    return None if longest is None or not server.rented else server.since + longest


def outlives(server: Server, until: float) -> bool:
    """Would holding `server` until `until` outlive its maximum rental length?"""
    end = ends_at(server)
    return end is not None and until > end + EPS_S


def best_that_holds(
    market: Market, ask: GpuAsk | None, excluded: Set[str], hold_s: float
) -> tuple[Quote | None, tuple[Quote, ...]]:
    """The best offer for `ask` whose maximum rental length holds `hold_s`, and the better
    ones passed over because theirs cannot. Each pass leaves one more host out, so this ends
    once the market has no fitting offer left."""
    passed: list[Quote] = []
    left_out = set(excluded)
    while True:
        quote = market.best(ask, left_out)
        if quote is None or holds(quote, hold_s):
            return quote, tuple(passed)
        passed.append(quote)
        left_out.add(quote.host)


def passed_over_text(passed: tuple[Quote, ...], hold_s: float) -> str:
    """Why offers were passed over, for a person: their length against the job's worst case."""
    if not passed:
        return ""
    longest = max(q.max_rental_s or 0.0 for q in passed)
    hosts = ", ".join(f"#{q.host}" for q in passed[:3]) + (" ..." if len(passed) > 3 else "")
    return (
        f"{len(passed)} offer(s) passed over ({hosts}): maximum rental length "
        f"{hours_text(longest)} or less cannot hold the job's worst case {hours_text(hold_s)} "
        "(the longest boot, its timeout and fetching its files)"
    )


def hours_text(seconds: float) -> str:
    """A length for a person: "17 min", "1.50 h", "72 h", "73.1 h"."""
    if seconds < 3600.0:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600.0
    if hours == int(hours):
        return f"{hours:.0f} h"
    return f"{hours:.1f} h" if hours >= 10 else f"{hours:.2f} h"
