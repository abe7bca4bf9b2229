"""Give back a runner's server from its record alone: prove the order ours, cancel, confirm, bill.

Used by `stop` (on another machine than `start`: no ledger row, no open connection) and by the
reaper. The order is cancelled only when `my_orders` (completed ones included) lists the
record's order id on the record's server with the record's creation time: anything else is
reported and left alone. A cancelled order can stay listed for a few seconds: the check is
repeated with backoff, with one more cancel for an order still live, for `confirm_within_s`.

Cost as billed: the API's `spend` (the listed price for the time held) plus the renter's fee,
plus the creation fee once the order lived 10 minutes, in USD at the server's own ratio
(`runner.core.bill.billed_cost`); our estimate only when the API reports no `spend`.
"""

from __future__ import annotations

import contextlib

from runner.backends.clore import bill
from runner.backends.clore.api import CloreClient
from runner.backends.clore.errors import CloreApiError
from runner.backends.clore.models import Order
from runner.backends.runner_record import Kind, Released, RunnerRental
from runner.clock import Clock

FIRST_PAUSE_S = 1.0


def proof_mismatch(order: Order, rental: RunnerRental) -> str | None:
    """Why `order` is not the record's order, or None when it is."""
    if order.si != rental.server_id:
        return f"order {order.id} is on server {order.si}, the record says {rental.server_id}"
    if order.ct is None or int(order.ct) != rental.created_unix:
        return f"order {order.id} was created at {order.ct}, the record says {rental.created_unix}"
    return None


def release(
    client: CloreClient, rental: RunnerRental, clock: Clock, confirm_within_s: float = 30.0
) -> Released:
    """Cancel the record's order if it is live, and say what it cost. Never raises for an
    API error: the result says `error`, and the rental stays for the reaper."""
    try:
        order = _find(client, rental.order_id)
        if order is None:
            return Released(rental, "not-listed", f"order {rental.order_id} is not in my_orders")
        why = proof_mismatch(order, rental)
        if why is not None:
            return Released(rental, "not-ours", f"{why}: not cancelled")
        if order.expired:
            return billed(rental, order, "ended", clock, rental.cap_unix, preempted_note(rental))
        offline = offline_note(rental, order)
        ended_at = clock.time()
        order = _cancel_and_confirm(client, order, clock, confirm_within_s)
    except CloreApiError as exc:
        return Released(rental, "error", f"order {rental.order_id}: {exc}")
    if not order.expired:
        return Released(rental, "still-live", f"order {order.id} is still listed after its cancel")
    return billed(rental, order, "cancelled", clock, ended_at, offline)


def offline_note(rental: RunnerRental, order: Order) -> str:
    """Words for an order listed but not online when stop comes: a spot order outbid (Clore
    stops its container and its billing, and keeps it listed until its bid wins again), or a
    host gone down. Its runner died with the container, and the job on it failed; no bid is
    raised to win it back: the runner's one-time registration is spent, the container would
    come back with no runner in it. Cancelled like any other."""
    if order.online:
        return ""
    why = "spot: outbid, or its host down" if rental.spot else "its host down"
    return (
        f"order {order.id} on server {order.si} was offline when stop came ({why}): its "
        "runner died with its container, a job on it failed (re-run it); cancelled"
    )


def preempted_note(rental: RunnerRental) -> str:
    if not rental.spot:
        return ""
    return (
        f"spot order {rental.order_id} had already ended when stop came (preempted): its "
        "runner died with it, a job on it failed (re-run it)"
    )


def _find(client: CloreClient, order_id: int) -> Order | None:
    return next((o for o in client.my_orders(return_completed=True) if o.id == order_id), None)


def _cancel_and_confirm(client: CloreClient, order: Order, clock: Clock, within_s: float) -> Order:
    """The order as last listed: `expired` once the cancel took."""
    deadline = clock.now() + within_s
    pause_s = FIRST_PAUSE_S
    while True:
        with contextlib.suppress(CloreApiError):  # already ended, or a hiccup: the listing decides
            client.cancel_order(order.id)
        client.limiter.back_off(pause_s)  # an order stays listed a moment after its cancel
        listed = _find(client, order.id)
        if listed is None:  # gone from the listing: ended, with no bill to read
            return order.model_copy(update={"expired": True, "spend": None})
        if listed.expired or clock.now() + pause_s > deadline:
            return listed
        order = listed
        pause_s = min(pause_s * 2, 8.0)


def billed(
    rental: RunnerRental,
    order: Order,
    kind: Kind,
    clock: Clock,
    ended_unix: float,
    detail: str = "",
) -> Released:
    lived_s = max(0.0, min(ended_unix, clock.time()) - rental.created_unix)
    if kind == "ended":
        # It ended before us (by itself: preempted, expired, its host gone): billed up to its
        # own end, `order_end - ct` where listed, else what its spend says at its price (the
        # creation fee hangs on that), if shorter than the cap.
        ended_s = bill.ended_lived_s(order.ct, order.order_end, order.spend, order.price)
        if ended_s is not None:
            lived_s = min(lived_s, ended_s)
    if order.spend is not None:
        cost = bill.billed_cost(
            order.spend, rental.usd_per_unit, rental.fee_rate, rental.creation_fee_native, lived_s
        )
        return Released(rental, kind, detail, cost=cost, lived_s=lived_s)
    creation_fee_usd = rental.creation_fee_native * rental.usd_per_unit
    cost = bill.estimated_cost(rental.usd_per_hour, lived_s, rental.fee_rate, creation_fee_usd)
    return Released(rental, kind, detail, cost=cost, estimated=True, lived_s=lived_s)
