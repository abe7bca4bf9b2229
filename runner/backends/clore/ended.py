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


def ended_cost_usd(rental: Rental, order: Order) -> float | None:
    """What `order` (the rental's) cost in USD up to its end, converted at the rental's own
    rate (the renter's fee included); None when neither its spend nor its lifetime is known."""
    if not rental.price_per_day:
        return None
    price_per_day = float(order.price or rental.price_per_day)
    start = bill.billing_start(order.ct, rental.create_sent_at)
    lived_s = bill.ended_lived_s(start, order.order_end, order.spend, price_per_day)
    spot = bool(order.spot if order.spot is not None else rental.spot)
    spend_native = bill.ended_spend_native(order.spend, price_per_day, lived_s, spot)
    if spend_native is None:
        return None
    usd_per_unit = (rental.usd_per_hour or 0.0) * 24 / rental.price_per_day
    fee_native = float(order.creation_fee or 0.0)
    if not bill.creation_fee_charged(lived_s or 0.0):
        fee_native = 0.0
    return (spend_native + fee_native) * usd_per_unit


def billed_usd(rental: Rental, orders: dict[int, Order] | None, worst_usd: float) -> float:
    """What `rental` cost in USD: what its order billed up to its end (whoever ended it),
    the creation fee only if it lived 10 minutes (the fee's grace, reference §4). Without the
    API's figures: the reservation's worst case. A rental whose create made nothing: $0."""
    if rental.state == "failed" and rental.order_id is None:
        return 0.0
    order_id = order_of(rental)
    order = (orders or {}).get(order_id) if order_id is not None else None
    cost = ended_cost_usd(rental, order) if order is not None else None
    return worst_usd if cost is None else cost
