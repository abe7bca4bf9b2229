"""Money in the units the marketplace quotes and we show: pure arithmetic, stdlib only, every
name carrying its unit.

Prices are quoted PER DAY and shown and capped PER HOUR. A marketplace may charge a one-off
creation fee once an order has lived a while: each quote says how much and after how long
(runner.core.rentals.Quote), so a budget's worst case counts it whenever a rental could live
that long. The marketplace's own rules (what a renter pays on top of a listed price, when the
fee is charged, what an order cost) are its backend's (Clore: runner/backends/clore/bill.py).

Names: `*_per_day` / `*_per_hour` are prices, `*_native` amounts in the order currency,
`*_usd` US dollars, `*_s` seconds, `*_fee_rate` a fraction (0.05 is 5 %).
"""

from __future__ import annotations

HOURS_PER_DAY = 24.0
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


def per_hour_from_per_day(price_per_day: float) -> float:
    """The one conversion from a per-day quote to per-hour (any currency)."""
    return price_per_day / HOURS_PER_DAY


def per_day_from_per_hour(price_per_hour: float) -> float:
    """The inverse of `per_hour_from_per_day`, for turning a per-hour cap into a per-day bid."""
    return price_per_hour * HOURS_PER_DAY


def worst_case_usd(
    with_fee_usd_per_hour: float,
    longest_hold_s: float,
    creation_fee_usd: float,
    fee_after_s: float = 0.0,
) -> float:
    """The most a rental can cost: its price with fee for the longest it can be held, plus the
    creation fee whenever it could live `fee_after_s` or more (the marketplace's grace; 0: the
    fee is charged from the start). A budget check must use this."""
    hours = max(0.0, longest_hold_s) / SECONDS_PER_HOUR
    fee_usd = creation_fee_usd if longest_hold_s >= max(0.0, fee_after_s) else 0.0
    return with_fee_usd_per_hour * hours + fee_usd


def usd_text(amount_usd: float) -> str:
    """An amount in a sentence: $0.25, $0.0062, $12.50. Below $10 up to four decimals, so
    fractions of a cent show and two different amounts never read alike ("$0.01 would be
    exceeded by $0.01" was a shortfall of $0.0062), at least two. The reports' columns keep
    four decimals below $10 (runner.figures.money): the same precision."""
    sign = "-" if amount_usd < 0 and round(amount_usd, 4) != 0 else ""
    size = abs(amount_usd)
    if size >= 10:
        return f"{sign}${size:.2f}"
    whole, _, cents = f"{size:.4f}".rstrip("0").partition(".")
    return f"{sign}${whole}.{cents.ljust(2, '0')}"
