"""One rental's life: ledger intent -> create_order -> online -> SSH -> ... -> cancel -> confirmed.

Every step that can cost money is written to the ledger first, and every failure after the order
exists cancels it before the error leaves this module. A host that fails for a reason of its own
raises `SkipOffer` (the caller excludes it and tries the next offer); reasons that doom every
offer raise `RunMustStop`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient, OrderRequest, may_have_created
from runner.backends.clore.market import Offer, per_hour, spot_bid_per_day
from runner.backends.clore.models import Order
from runner.backends.clore.ratelimit import Clock, RequestAborted
from runner.backends.ssh_connection import ConnectOptions, Endpoint, SshConnection, connect
from runner.backends.ssh_keys import ClientKey, HostKeyStore
from runner.core.model import Job
from runner.errors import InfrastructureError, RunMustStop
from runner.ledger import LedgerError, State
from runner.stores.ledger import RentalLedger
from runner.stores.pools import Reservation

if TYPE_CHECKING:  # psycopg is an extra: only a run that joins a pool imports it
    from runner.stores.pool_seat import PoolSeat

# An image whose entrypoint runs sshd with the `ssh_key` given at create (reference §3).
DEFAULT_IMAGE = "cloreai/jupyter:ubuntu24.04-v2"
_FATAL = (api_errors.NotEnoughBalanceError, api_errors.InvalidTokenError)


class SkipOffer(InfrastructureError):
    """This host failed for a reason of its own: exclude it and try the next offer."""


class ProvisionCancelled(InfrastructureError):
    """The run was cancelled while this rental was being set up (the order is cancelled)."""


def _wait_on_event(seconds: float, cancel: threading.Event) -> None:
    cancel.wait(seconds)


@dataclass(frozen=True)
class ProvisionOptions:
    online_timeout_s: float = 900.0  # create -> online, image pull included
    first_poll_s: float = 3.0  # my_orders polling backoff (the rate limiter spaces it further)
    max_poll_s: float = 30.0
    ssh: ConnectOptions = field(
        default_factory=lambda: ConnectOptions(tries=10, backoff_s=2.0, max_backoff_s=20.0)
    )
    confirm_tries: int = 3  # my_orders checks that a cancelled order is gone
    # How to pause between polls: the real clock waits on the cancel event; tests pass their
    # fake clock's sleep so nothing waits real seconds.
    pause: Callable[[float, threading.Event], None] = _wait_on_event


@dataclass
class Rental:
    """A server we hold (or are setting up)."""

    rental_id: int
    job_id: str
    offer: Offer
    price_per_day: float  # in `currency`
    currency: str
    usd_per_hour: float
    order_id: int | None = None
    conn: SshConnection | None = None
    held_since: float = 0.0  # unix seconds (the injected clock)
    billed_until: float = 0.0  # cost up to here is already on some attempt
    creation_fee_usd: float = 0.0
    fee_billed: bool = False
    lost: bool = False  # the server dropped us (spot outbid, gone): never reuse
    spot: bool = False  # a spot order: it can be outbid
    reservation: Reservation | None = None  # its share of a budget pool, when the run joined one
    facts: dict[str, str] = field(default_factory=dict)


@dataclass
class Provisioner:
    client: CloreClient
    ledger: RentalLedger
    run_id: str
    key: ClientKey
    host_keys: HostKeyStore
    clock: Clock
    currency: str
    options: ProvisionOptions = field(default_factory=ProvisionOptions)
    seat: PoolSeat | None = None  # the budget pool this run joined, if any
    # Gives back one idle server of this run (True if it did), when the pool is full.
    make_room: Callable[[], bool] = lambda: False
    _wasted_usd: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def rent(self, job: Job, offer: Offer, cancel: threading.Event) -> Rental:
        """Rent `offer` for `job` and return it reachable over SSH, or raise (nothing held)."""
        reservation = self._reserve(job, offer, cancel)
        try:
            rental = self._intent(job, offer)
            rental.reservation = reservation
            if reservation is not None and self.seat is not None:
                self.seat.attach(reservation, rental.rental_id)  # before the create is sent
        except BaseException:
            self._settle(reservation, 0.0)  # no create was sent: it made nothing
            raise
        order = self._create(rental, job, cancel)
        rental.order_id = order.id
        rental.held_since = rental.billed_until = order.ct or self.clock.time()
        self._note_fee(rental, order)
        try:  # the order exists: from here on, every failure cancels it
            self.ledger.set_order(rental.rental_id, order.id)
            self.ledger.set_state(rental.rental_id, "ordered")
            order = self._wait_online(order.id, cancel)
            rental.conn = self._connect(order, cancel)
            self.ledger.set_state(rental.rental_id, "running")
        except BaseException:
            self._waste(rental, self.release(rental))
            raise
        return rental

    def take_wasted_usd(self) -> float:
        """What orders cancelled before they served any job cost (fee and minutes, USD) since
        the last call: billed all the same, so the budget and the total must count it."""
        with self._lock:
            wasted, self._wasted_usd = self._wasted_usd, 0.0
        return wasted

    def _waste(self, rental: Rental, final_usd: float | None) -> None:
        if final_usd is None:  # the API reported no spend: our own estimate
            held_s = max(0.0, self.clock.time() - rental.held_since)
            final_usd = rental.usd_per_hour * held_s / 3600 + rental.creation_fee_usd
        with self._lock:
            self._wasted_usd += final_usd

    # -- the pool ------------------------------------------------------------------------

    def _reserve(self, job: Job, offer: Offer, cancel: threading.Event) -> Reservation | None:
        """The rental's worst case (its price for the job's whole timeout) from the pool, as
        the run's own budget counts it."""
        price_per_day = self.price_per_day(job, offer)
        if self.seat is None or price_per_day is None:
            return None
        worst_usd = self.usd_per_hour(offer, price_per_day) * job.timeout_s / 3600
        label = f"{self.run_id}/{job.id} server {offer.server_id}"
        return self.seat.reserve(worst_usd, label, cancel, self.make_room)

    def cover(self, rental: Rental, job: Job) -> bool:
        """Can a kept server take `job`? Its reservation must grow by the job's worst case."""
        if self.seat is None or rental.reservation is None:
            return True
        return self.seat.grow(rental.reservation, rental.usd_per_hour * job.timeout_s / 3600)

    def _settle(self, reservation: Reservation | None, billed_usd: float) -> None:
        if reservation is not None and self.seat is not None:
            self.seat.settle(reservation, billed_usd)

    def close_pool(self) -> None:
        """Leave the pool (idempotent): anything unsettled is left to a reaper."""
        seat, self.seat = self.seat, None
        if seat is not None:
            seat.close()

    # -- steps -----------------------------------------------------------------------------

    def price_per_day(self, job: Job, offer: Offer) -> float | None:
        """What renting `offer` for `job` will cost per day in the order currency: the spot
        bid (None when no bid fits the cap) or the on-demand price."""
        if job.gpu is not None and job.gpu.spot:
            return spot_bid_per_day(offer, job.gpu.max_usd_per_hour)
        return offer.on_demand_price_per_day or 0.0

    def usd_per_hour(self, offer: Offer, price_per_day: float) -> float:
        return per_hour(price_per_day) * (offer.usd_per_unit or 0.0)

    def _intent(self, job: Job, offer: Offer) -> Rental:
        price_per_day = self.price_per_day(job, offer)
        if price_per_day is None:
            raise SkipOffer(f"server {offer.server_id}: no spot bid fits the price cap")
        usd_per_hour = self.usd_per_hour(offer, price_per_day)
        rental_id = self.ledger.record_intent(
            self.run_id, job.id, offer.server_id, price_per_day, self.currency, usd_per_hour
        )
        rental = Rental(rental_id, job.id, offer, price_per_day, self.currency, usd_per_hour)
        rental.spot = job.gpu is not None and job.gpu.spot
        return rental

    def _create(self, rental: Rental, job: Job, cancel: threading.Event) -> Order:
        spot = job.gpu is not None and job.gpu.spot
        request = OrderRequest(
            server_id=rental.offer.server_id,
            image=job.image or DEFAULT_IMAGE,
            currency=self.currency,
            spot_price_per_day=rental.price_per_day if spot else None,
            ssh_key=self.key.public_line,
        )
        try:
            return self.client.create_order(request, abort=cancel)
        except RequestAborted:
            # Given up while waiting for the create's rate-limit slot: nothing was sent.
            self.ledger.set_state(rental.rental_id, "failed", "cancelled before the create")
            self._settle(rental.reservation, 0.0)
            raise ProvisionCancelled(f"server {rental.offer.server_id}: cancelled") from None
        except _FATAL as exc:
            self.ledger.set_state(rental.rental_id, "failed", str(exc))
            self._settle(rental.reservation, 0.0)
            raise RunMustStop(str(exc)) from None
        except api_errors.CloreApiError as exc:
            if isinstance(exc, api_errors.OrderOutcomeUnknownError) or may_have_created(exc):
                # Maybe billed, though not found yet: the intent stays open for `cleanup`,
                # which looks again; `failed` would hide a server that shows up later.
                self.ledger.set_state(rental.rental_id, "intent", str(exc))
            else:
                self.ledger.set_state(rental.rental_id, "failed", str(exc))
                self._settle(rental.reservation, 0.0)
            raise SkipOffer(f"server {rental.offer.server_id}: {exc}") from None

    def _wait_online(self, order_id: int, cancel: threading.Event) -> Order:
        deadline = self.clock.now() + self.options.online_timeout_s
        delay = self.options.first_poll_s
        while True:
            if cancel.is_set():
                raise ProvisionCancelled(f"order {order_id}: cancelled while starting")
            order = next((o for o in self.client.my_orders() if o.id == order_id), None)
            if order is None or order.expired:
                raise SkipOffer(f"order {order_id} ended before it came online")
            if order.ready:
                return order
            if self.clock.now() >= deadline:
                raise SkipOffer(
                    f"order {order_id} not online after {self.options.online_timeout_s:g} s"
                )
            self.options.pause(delay, cancel)
            delay = min(delay * 1.5, self.options.max_poll_s)

    def _connect(self, order: Order, cancel: threading.Event) -> SshConnection:
        endpoint = order.ssh_endpoint
        assert endpoint is not None  # order.ready guarantees it
        host, port = endpoint
        try:
            return connect(
                Endpoint(host, port, "root"), self.key, self.host_keys, self.options.ssh, cancel
            )
        except InfrastructureError as exc:
            if cancel.is_set():
                raise ProvisionCancelled(str(exc)) from None
            raise SkipOffer(f"order {order.id}: sshd never answered: {exc}") from None

    def _note_fee(self, rental: Rental, order: Order) -> None:
        fee = order.creation_fee or 0.0
        rental.creation_fee_usd = fee * (rental.offer.usd_per_unit or 0.0)

    # -- giving back -----------------------------------------------------------------------

    def release(self, rental: Rental) -> float | None:
        """Cancel the order and confirm it is gone. Returns its final cost in USD when the API
        reported it (`spend`), else None. Never raises: what stays unconfirmed stays in the
        ledger as `releasing`, for `clore-run cleanup`."""
        return self.release_all([rental]).get(rental.rental_id)

    def release_all(self, rentals: list[Rental]) -> dict[int, float | None]:
        """Cancel every order first, then confirm them together: with one API call a second,
        a shutdown that confirmed each order in turn would not end within GitHub's 7.5 s."""
        finals: dict[int, float | None] = {}
        waiting: dict[int, Rental] = {}
        for rental in rentals:
            if rental.conn is not None:
                rental.conn.close()
            finals[rental.rental_id] = None
            if rental.order_id is not None:
                self._note(rental, "releasing")
                waiting[rental.order_id] = rental
        for _ in range(self.options.confirm_tries):
            if not waiting:
                break
            for order_id in waiting:
                self._cancel(order_id)
            for order_id, gone, spend in self._check(list(waiting)):
                rental = waiting[order_id]
                if spend is not None:
                    fee = rental.creation_fee_usd
                    finals[rental.rental_id] = spend * (rental.offer.usd_per_unit or 0.0) + fee
                if gone:
                    self._note(rental, "released")
                    self._settle(rental.reservation, self._final_usd(rental, finals))
                    del waiting[order_id]
        return finals

    def _final_usd(self, rental: Rental, finals: dict[int, float | None]) -> float:
        final = finals.get(rental.rental_id)
        if final is not None:
            return final
        held_s = max(0.0, self.clock.time() - rental.held_since)  # no `spend`: our estimate
        return rental.usd_per_hour * held_s / 3600 + rental.creation_fee_usd

    def _note(self, rental: Rental, state: State) -> None:
        """A ledger write while giving back: a failing ledger must not stop the cancels (the
        row stays open, and `clore-run cleanup` finds the order ended)."""
        with contextlib.suppress(LedgerError):
            self.ledger.set_state(rental.rental_id, state)

    def _cancel(self, order_id: int) -> None:
        # Already ended, or a hiccup: the my_orders check decides.
        with contextlib.suppress(api_errors.CloreApiError):
            self.client.cancel_order(order_id)

    def _check(self, order_ids: list[int]) -> list[tuple[int, bool, float | None]]:
        """(order id, gone?, spend) for each, from one my_orders call."""
        try:
            orders = {o.id: o for o in self.client.my_orders(return_completed=True)}
        except api_errors.CloreApiError:
            return []
        out: list[tuple[int, bool, float | None]] = []
        for order_id in order_ids:
            order = orders.get(order_id)
            if order is None:
                out.append((order_id, True, None))
            else:
                out.append((order_id, bool(order.expired), order.spend))
        return out
