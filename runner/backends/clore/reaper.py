"""Reaping: what happens to a pool holder that stopped heartbeating (killed, frozen, cut off).

A reaper (any run or serve instance, or `clore-run cleanup --coordinator URL`) takes an expired
lease, or the live lease of a holder it can prove dead (a process of its own host that is gone:
`reap_proven_dead`), with a new fencing token, which fences the old holder out. It then does
what that holder can no longer do: reconciles its rentals with `my_orders` (a rental whose
create was sent but whose order id was never written is found there by its create's tag),
cancels what is live, and settles each reservation with what its rental was billed, up to
the order's end: an order that ended by itself (expired, preempted, its host gone) is settled
at what it billed until then, not at the moment the reaper came. A rental
whose cancel is not confirmed keeps its reservation (the server may bill on): the lease expires
again and the next reaper retries.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner import liveness
from runner.backends.clore import bill
from runner.backends.clore.api import CloreClient
from runner.backends.clore.cleanup import Action, reconcile
from runner.backends.clore.ended import billed_usd
from runner.backends.clore.errors import CloreApiError
from runner.backends.clore.fees import read_fee_schedule
from runner.backends.clore.models import Order
from runner.clock import Clock
from runner.stores.ledger import Rental, RentalLedger
from runner.stores.pools import Lease, Reservation
from runner.stores.pools.postgres import PostgresPools

REAPER_TTL_S = 300.0  # a reconcile waits for my_orders to settle: minutes at worst


@dataclass(frozen=True)
class Reaped:
    """What one reaped lease came to."""

    lease: Lease
    actions: list[Action]
    settled: dict[int, float]  # reservation id -> USD billed
    left: list[Reservation]  # not settled: their rental could not be confirmed released

    @property
    def done(self) -> bool:
        return not self.left

    @property
    def unproven(self) -> list[Action]:
        """The rentals left with an order that may be theirs, none proven: named, kept."""
        return [a for a in self.actions if a.kind == "unproven"]


def reap(
    pools: PostgresPools,
    ledger: RentalLedger,
    client: CloreClient,
    reaper: str,
    *,
    limit: int = 10,
    clock: Clock | None = None,
    settle_s: float | None = None,
    cancel_unproven: bool = False,
) -> list[Reaped]:
    """Take and settle up to `limit` expired leases (none is taken twice across reapers).
    `cancel_unproven`: as `reconcile`'s (a person's decision, for a key no other run uses);
    without it an order that may be a holder's, none proven, is named in its actions
    (`unproven`) and its reservation kept: the lease expires again, and it is named again."""
    out = []
    for lease in pools.take_expired(reaper, REAPER_TTL_S, limit):
        actions = reconcile(
            ledger,
            client,
            dry_run=False,
            run_id=lease.holder,
            clock=clock,
            settle_s=settle_s,
            cancel_unproven=cancel_unproven,
        )
        out.append(_settle(pools, ledger, client, lease, actions))
    return out


def reap_holder(
    pools: PostgresPools,
    ledger: RentalLedger,
    client: CloreClient,
    holder: str,
    reaper: str,
    cancel_unproven: bool = False,
) -> Reaped | None:
    """Reap `holder` now, its lease expired or not (it is known dead: a serve instance whose
    queue lease was taken). None: it held no lease. A lease taken twice (a rerun) is harmless:
    each take fences the one before, and a settle only touches what is unsettled."""
    lease = pools.take_holder(holder, reaper, REAPER_TTL_S)
    if lease is None:
        return None
    actions = reconcile(
        ledger, client, dry_run=False, run_id=holder, cancel_unproven=cancel_unproven
    )
    return _settle(pools, ledger, client, lease, actions)


def reap_proven_dead(
    pools: PostgresPools,
    ledger: RentalLedger,
    client: CloreClient,
    reaper: str,
    cancel_unproven: bool = False,
) -> list[Reaped]:
    """Reap at once every live lease whose holder is provably dead: a process on this host
    (same boot, same pid namespace) that is gone, or whose pid another process now holds."""
    out = []
    for held in pools.live_leases():
        if liveness.state(liveness.Holder.parse(held.owner)) is False:
            done = reap_holder(pools, ledger, client, held.holder, reaper, cancel_unproven)
            if done is not None:
                out.append(done)
    return out


def _settle(
    pools: PostgresPools,
    ledger: RentalLedger,
    client: CloreClient,
    lease: Lease,
    actions: list[Action],
) -> Reaped:
    rentals = {r.id: r for r in ledger.rentals(lease.holder)}
    orders = _orders(client, [r for r in rentals.values() if r.order_id is not None])
    rates = _FeeRates(client)
    settled: dict[int, float] = {}
    left: list[Reservation] = []
    for reservation in pools.reservations(lease.holder):
        rental = rentals.get(reservation.rental_id) if reservation.rental_id else None
        if reservation.rental_id is None:
            billed = 0.0  # tied before any create is sent: no rental, no bill
        elif rental is None or rental.state not in ("released", "failed"):
            left.append(reservation)
            continue
        else:
            billed = billed_usd(rental, orders, reservation.amount_usd, rates.of(rental))
        pools.settle(lease, reservation.id, billed)
        settled[reservation.id] = billed
    if not left:
        pools.finish(lease)
    return Reaped(lease, actions, settled, left)


class _FeeRates:
    """The account's renter fee rates per currency, read once each (`renter_fees`), only for
    a rental to settle: the settlement is what the wallet lost, at the rates the rental's
    USD per hour was priced with. When they cannot be read, the documented ones."""

    def __init__(self, client: CloreClient) -> None:
        self._client = client
        self._by_currency: dict[str, bill.RenterFeeRates] = {}

    def of(self, rental: Rental) -> bill.RenterFeeRates:
        currency = rental.currency or ""
        if currency not in self._by_currency:
            try:
                rates = read_fee_schedule(self._client, currency).rates
            except CloreApiError:
                rates = bill.DOCUMENTED_RATES
            self._by_currency[currency] = rates
        return self._by_currency[currency]


def _orders(client: CloreClient, rentals: list[Rental]) -> dict[int, Order] | None:
    if not rentals:
        return {}
    try:
        return {o.id: o for o in client.my_orders(return_completed=True)}
    except CloreApiError:
        return None
