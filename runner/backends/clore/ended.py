"""What an ended order cost, from `my_orders`' completed listing: for the reaper's settlements
and `clore-run cleanup`'s words.

An order ends by our cancel or by itself (its host's maximum rental length reached, a spot
order preempted, its host gone). Either way it billed up to its own end: `order_end - ct` on
the API's clock, never up to the moment someone looked. Its listed-price part is its `spend`
(or, a completed order listing none, its price for that time: `bill.ended_spend_native`), the
renter's fee on top, and the creation fee only if it lived the fee's grace.
"""

from __future__ import annotations

from runner.backends.clore import bill
from runner.backends.clore.models import Order
from runner.backends.clore.ownership import order_of
from runner.stores.ledger import Rental


def ended_cost_usd(
    rental: Rental, order: Order, rates: bill.RenterFeeRates = bill.DOCUMENTED_RATES
) -> float | None:
    """What `order` (the rental's) cost in USD up to its end, as `bill.billed_cost` reckons
    it: the renter's fee (`rates`: the account's, read where the caller can) on its spend, the
    creation fee as charged, with no renter's fee on it. None when neither its spend nor its
    lifetime is known."""
    if not rental.price_per_day:
        return None
    price_per_day = float(order.price or rental.price_per_day)
    start = bill.billing_start(order.ct, rental.create_sent_at)
    lived_s = bill.ended_lived_s(start, order.order_end, order.spend, price_per_day)
    spot = bool(order.spot if order.spot is not None else rental.spot)
    spend_native = bill.ended_spend_native(order.spend, price_per_day, lived_s, spot)
    if spend_native is None:
        return None
    fee_rate = rates.fee_rate(spot)
    # The ledger keeps the rental's USD per hour with the renter's fee in it (what the UI
    # shows): the server's own USD per native unit is that rate without the fee.
    usd_per_native = (rental.usd_per_hour or 0.0) * 24 / rental.price_per_day / (1 + fee_rate)
    creation_fee_native = float(order.creation_fee or 0.0)
    cost = bill.billed_cost(
        spend_native, usd_per_native, fee_rate, creation_fee_native, lived_s or 0.0
    )
    return cost.total_usd


def billed_usd(
    rental: Rental,
    orders: dict[int, Order] | None,
    worst_usd: float,
    rates: bill.RenterFeeRates = bill.DOCUMENTED_RATES,
) -> float:
    """What `rental` cost in USD: what its order billed up to its end (whoever ended it),
    the creation fee only if it lived 10 minutes (the fee's grace, reference §4). Without the
    API's figures: the reservation's worst case. A rental whose create made nothing: $0."""
    if rental.state == "failed" and rental.order_id is None:
        return 0.0
    order_id = order_of(rental)
    order = (orders or {}).get(order_id) if order_id is not None else None
    cost = ended_cost_usd(rental, order, rates) if order is not None else None
    return worst_usd if cost is None else cost
