"""Money as Clore bills it: the renter's fee on top of the listed price, and what an order cost.

On top of the listed price the renter pays its half of the base marketplace fee (documented: 5 %
on-demand, 2.5 % / 2 = 1.25 % spot; an account holding CLORE may pay less, which `renter_fees`
reports). The one-off creation fee is charged only for an order that lives 10 minutes or more
(`creation_fee_charged`; Clore's quotes carry it to the core as `Quote.creation_fee_after_s`).
An order's `spend` holds the listed price alone, so the wallet loses `spend` x (1 + fee rate),
plus the creation fee past 10 minutes.

Names as in runner.core.money: the unit in every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.money import SECONDS_PER_DAY, SECONDS_PER_HOUR

# The renter's half of the base fee, as documented; the account's own rates replace them.
DOCUMENTED_ON_DEMAND_FEE_RATE = 0.05
DOCUMENTED_SPOT_FEE_RATE = 0.0125
# A rate outside [0, MAX_PLAUSIBLE_FEE_RATE] is read as a misunderstood reply (a percentage
# sent as 5, say), not as a fee: the documented rate is safer than a 500 % surcharge or a 0.
MAX_PLAUSIBLE_FEE_RATE = 0.5
# No creation fee is documented; the one captured real order carried 0.1 USD-Blockchain. It
# stands in, in USD, where the account's own fee for the currency is unknown: a worst case
# needs some figure, and a plan made without an API key has no other.
FALLBACK_CREATION_FEE_USD = 0.1
# "If the renter cancels within 10 minutes, no creation fee is charged" (Clore's host fee guide).
CREATION_FEE_GRACE_S = 600.0
# How long a rented server may take from the create to coming online before it is given up,
# unless a job sets `boot-timeout-minutes`. Most real orders that fail never come online
# (reference/clore-api.md §8): this bound ends well inside the creation fee's grace, so such a
# host costs minutes of rental and never the fee. The SSH probe after "online" adds at most
# about 3 minutes, and the cancel goes out before the 10-minute mark.
DEFAULT_BOOT_BOUND_S = 360.0


def creation_fee_charged(lived_s: float) -> bool:
    """Whether Clore charges the creation fee for an order that lived `lived_s` seconds."""
    return lived_s >= CREATION_FEE_GRACE_S


@dataclass(frozen=True)
class RenterFeeRates:
    """The renter's base fee rates and where they come from ("account": the API's
    `renter_fees` for this key; "documented": Clore's published rates, used when the account's
    could not be read)."""

    on_demand_fee_rate: float = DOCUMENTED_ON_DEMAND_FEE_RATE
    spot_fee_rate: float = DOCUMENTED_SPOT_FEE_RATE
    source: str = "documented"
    note: str = ""  # why the documented rates are used, when they are

    def fee_rate(self, spot: bool) -> float:
        return self.spot_fee_rate if spot else self.on_demand_fee_rate


DOCUMENTED_RATES = RenterFeeRates()


def renter_fee_rates(
    account_on_demand_fee_rate: float | None, account_spot_fee_rate: float | None
) -> RenterFeeRates:
    """The account's rates where both are plausible fractions, else the documented ones."""
    on_demand, spot = account_on_demand_fee_rate, account_spot_fee_rate
    if on_demand is not None and spot is not None and _plausible(on_demand) and _plausible(spot):
        return RenterFeeRates(on_demand, spot, "account")
    return RenterFeeRates(note="your fee rates gave no usable rate for this currency")


def _plausible(fee_rate: float) -> bool:
    return 0.0 <= fee_rate <= MAX_PLAUSIBLE_FEE_RATE


def with_fee_per_hour(listed_price_per_hour: float, fee_rate: float) -> float:
    """What an hour costs the renter: the listed price plus the renter's fee on top."""
    return listed_price_per_hour * (1.0 + fee_rate)


def listed_per_hour_under_cap(cap_with_fee_per_hour: float, fee_rate: float) -> float:
    """The highest listed price whose cost with fee stays within a cap (the inverse of
    `with_fee_per_hour`), for turning a user's `max-price` into a bid limit."""
    return cap_with_fee_per_hour / (1.0 + fee_rate)


@dataclass(frozen=True)
class BilledCost:
    """One order's cost in USD as the wallet loses it, in its parts."""

    rental_usd: float  # `spend`: the listed price for the time held
    renter_fee_usd: float  # the renter's share of the base fee, on top
    creation_fee_usd: float  # 0 for an order cancelled within 10 minutes

    @property
    def total_usd(self) -> float:
        return self.rental_usd + self.renter_fee_usd + self.creation_fee_usd


def billed_cost(
    spend_native: float,
    usd_per_native_unit: float,
    fee_rate: float,
    creation_fee_native: float,
    lived_s: float,
) -> BilledCost:
    """What an order cost, from the API's `spend` (the listed price alone) and its lifetime."""
    rental_usd = max(0.0, spend_native) * usd_per_native_unit
    fee_native = creation_fee_native if creation_fee_charged(lived_s) else 0.0
    return BilledCost(
        rental_usd=rental_usd,
        renter_fee_usd=rental_usd * fee_rate,
        creation_fee_usd=max(0.0, fee_native) * usd_per_native_unit,
    )


def estimated_cost(
    with_fee_usd_per_hour: float, held_s: float, fee_rate: float, creation_fee_usd: float
) -> BilledCost:
    """Our own estimate of an order's cost when the API reports no `spend`: the same parts,
    from the hourly price with fee and the time held."""
    total_rent_usd = with_fee_usd_per_hour * max(0.0, held_s) / SECONDS_PER_HOUR
    rental_usd = total_rent_usd / (1.0 + fee_rate)
    return BilledCost(
        rental_usd=rental_usd,
        renter_fee_usd=total_rent_usd - rental_usd,
        creation_fee_usd=creation_fee_usd if creation_fee_charged(held_s) else 0.0,
    )


def ended_lived_s(
    ct: float | None,
    order_end: float | None,
    spend_native: float | None = None,
    price_per_day: float | None = None,
) -> float | None:
    """How long an order that ended lived, as the API billed it: `order_end - ct` where the
    API lists both (one clock, whoever ended it: us, or the host by itself: expired,
    preempted, gone); else what its `spend` says at its price; None when neither is known.
    The creation fee hangs on this, and an order found ended long after it ended must not be
    billed up to the moment it was found."""
    if ct is not None and order_end is not None and order_end >= ct:
        return order_end - ct
    if spend_native is not None and price_per_day:
        return max(0.0, spend_native) / price_per_day * SECONDS_PER_DAY
    return None


def ended_spend_native(
    spend_native: float | None, price_per_day: float | None, lived_s: float | None, spot: bool
) -> float | None:
    """What an ended order billed at its listed price (native, no fees): its `spend`, or, when
    the completed order lists none, its price for the time it lived. An on-demand order bills
    its price for all that time: a `spend` short of it (a completed order's 0) is not believed
    over the time the API itself stamps. A spot order bills nothing while outbid, so its
    `spend` stands where it is given."""
    by_time = None
    if price_per_day and lived_s is not None:
        by_time = price_per_day * max(0.0, lived_s) / SECONDS_PER_DAY
    if spend_native is None:
        return by_time
    if by_time is None or spot:
        return max(0.0, spend_native)
    return max(spend_native, by_time)


# `ct` may be stamped well after an order began billing (one order's `order_end - ct` was 948 s
# against 1,006 s its spend billed): a `ct` later than our create's send by more than the
# API's pacing and clocks' skew allow is not believed as the start of its billing.
CT_LATE_AFTER_S = 10.0


def billing_start(ct: float | None, create_sent_unix: float | None) -> float | None:
    """When an order began billing, as best known: its `ct`, or our create's send where `ct`
    is later than that by more than `CT_LATE_AFTER_S` (at worst a few seconds early: the
    cautious side)."""
    if ct is None or create_sent_unix is None:
        return ct if ct is not None else create_sent_unix
    return create_sent_unix if ct > create_sent_unix + CT_LATE_AFTER_S else ct


@dataclass(frozen=True)
class Share:
    """One attempt's share of an order held (or the idle time between two), in USD."""

    usd: float
    billed_until: float  # unix seconds: the next share starts here
    fee_billed: bool  # the creation fee is on some share now


def share_since(
    with_fee_usd_per_hour: float,
    billed_until: float,
    now_unix: float,
    held_since: float,
    creation_fee_usd: float,
    fee_billed: bool,
) -> Share:
    """What an order cost since its last share, on our own clock: the hourly price with fee
    for the time since `billed_until`, and the creation fee on the share that sees the order
    past its grace (none is charged for an order cancelled sooner; the final settlement
    catches one it passes later)."""
    usd = with_fee_usd_per_hour * max(0.0, now_unix - billed_until) / SECONDS_PER_HOUR
    charged = not fee_billed and creation_fee_charged(now_unix - held_since)
    return Share(usd + (creation_fee_usd if charged else 0.0), now_unix, fee_billed or charged)
