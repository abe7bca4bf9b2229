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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runner.backends.base import NO_STAGES, StageSink
from runner.backends.clore import bill
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient, OrderRequest
from runner.backends.clore.boot_watch import BootWatch
from runner.backends.clore.fees import FeeSchedule, read_fee_schedule
from runner.backends.clore.market import Offer
from runner.backends.clore.models import Order
from runner.backends.clore.order_create import may_have_created
from runner.backends.clore.order_release import Releaser
from runner.backends.clore.ownership import LedgerMarks, order_of, read_echo, record_order
from runner.backends.clore.ratelimit import RequestAborted
from runner.backends.clore.rental import (
    ProvisionCancelled,
    ProvisionOptions,
    Rental,
    SkipOffer,
)
from runner.backends.clore.settings import DEFAULT_IMAGE as DEFAULT_IMAGE  # its old home
from runner.backends.clore.settings import image_runs_sshd
from runner.backends.clore.spot_bids import SpotBids
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock
from runner.core import money
from runner.core.model import Job
from runner.core.pulls import BootBounds, Pulls, boot_bounds, image_allowance_s
from runner.core.rental_length import worst_hold_s
from runner.errors import InfrastructureError, RunMustStop
from runner.stores.ledger import LedgerError, RentalLedger
from runner.stores.pools import Reservation

if TYPE_CHECKING:  # psycopg is an extra: only a run that joins a pool imports it
    from runner.stores.pools.seat import PoolSeat

_FATAL = (api_errors.NotEnoughBalanceError, api_errors.InvalidTokenError)
SPOT_BOOK_TTL_S = 30.0  # a server's spot book read for the budget check serves the create too
MAX_REBIDS = 3  # raises of one spot order's bid before the job moves to another host


def _proof(order: Order, tag: int | None) -> str:
    """Why `order` was taken for ours, in words for the ledger."""
    if tag is not None and tag in read_echo(order.http_port).ports:
        return f"it echoes our tag {tag} (http_port {order.http_port!r}) on server {order.si}"
    return (
        f"the one order listed on server {order.si} since our accepted create, in its window, "
        f"showing no other create's tag (http_port {order.http_port!r}; ours {tag})"
    )


def _cancel_hint(run_id: str) -> str:
    return (
        f"if no other run uses this API key, `clore-run cleanup --run {run_id} "
        "--cancel-unproven` cancels it; else check it on clore.ai"
    )


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
    _fees: FeeSchedule | None = field(default=None, init=False)
    # Set when the run is being stopped (a signal): confirming releases is cut short, the
    # cancels having gone out, and what is unconfirmed is left to `clore-run cleanup`.
    hurry: threading.Event = field(default_factory=threading.Event, init=False)
    _cancels: threading.Lock = field(default_factory=threading.Lock, init=False)
    # What the host history says of each image's pulls: the deploy bound follows it. The
    # backend sets it from the history it read at the start of the run.
    pulls: Pulls = field(default_factory=lambda: Pulls(default_image=DEFAULT_IMAGE))
    # Orders that may be ours and could not be proven (a line each): left running, named at
    # the run's end (screen, summary.json's warnings, an `::error::`), exit 3.
    unproven: list[tuple[str, str]] = field(default_factory=list, init=False)  # (what, hint)
    # Prices and bids, from the spot books it reads (the core's loop prices with them too).
    bids: SpotBids = field(init=False)

    def __post_init__(self) -> None:
        self.bids = SpotBids(self.client, self.clock, self.currency)

    def fees(self) -> FeeSchedule:
        """The account's fees, read once per run (the documented ones if that fails)."""
        with self._lock:
            if self._fees is None:
                self._fees = read_fee_schedule(self.client, self.currency)
            return self._fees

    def rent(
        self,
        job: Job,
        offer: Offer,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
        track: Callable[[Rental], None] | None = None,
        deploying: Callable[[], None] | None = None,
    ) -> Rental:
        """Rent `offer` for `job` and return it reachable over SSH, or raise (nothing held).
        `track` gets the rental as soon as its intent is in the ledger: its `order_id` is set
        the moment the order is known, so a shutdown can cancel it without waiting for this.
        `deploying` is told once the order is online, its container deploying: the host is
        alive, whatever its image's pull takes from there."""
        reservation = self._reserve(job, offer, cancel)
        try:
            rental = self._intent(job, offer)
            if track is not None:
                track(rental)
            rental.reservation = reservation
            if reservation is not None and self.seat is not None:
                self.seat.attach(reservation, rental.rental_id)  # before the create is sent
        except BaseException:
            self._settle_pool(reservation, 0.0)  # no create was sent: it made nothing
            raise
        asked = self.clock.now()
        sent_unix = self.clock.time()
        order = self._create(rental, job, cancel)
        rental.order_id = order.id
        sent_unix = self._sent_at(rental.rental_id, sent_unix)
        start = bill.billing_start(order.ct, sent_unix) if order.ct else None
        rental.held_since = rental.billed_until = start or self.clock.time()
        self._note_fee(rental, order)
        try:  # the order exists: from here on, every failure cancels it
            record_order(self.ledger, rental.rental_id, order.id)
            self.ledger.record_verdict(
                rental.rental_id, "ours", _proof(order, rental.tag), str(order.id)
            )
            self.ledger.set_state(rental.rental_id, "ordered")
            stages.stage("booting", f"order {order.id}")
            rental.image = job.image or DEFAULT_IMAGE
            order = self._wait_deployed(order.id, cancel, rental, self.bounds(job), deploying)
            stages.stage("connecting", f"order {order.id}")
            rental.conn = self._boots().connect(order, cancel)
            rental.facts["ssh_ready_after_s"] = f"{self.clock.now() - asked:.1f}"
            self.ledger.set_state(rental.rental_id, "running")
        except BaseException:
            self._waste(rental, self.release(rental))
            raise
        return rental

    def _sent_at(self, rental_id: int, before_unix: float) -> float:
        """When the create went out, as its ledger row marks it (the rate limiter may have
        held it a while after `before_unix`, the moment it was asked for)."""
        with contextlib.suppress(LedgerError):
            for row in self.ledger.rentals(self.run_id):
                if row.id == rental_id and row.create_sent_at is not None:
                    return row.create_sent_at
        return before_unix

    def take_wasted_usd(self) -> float:
        """What orders cancelled before they served any job cost (fee and minutes, USD) since
        the last call: billed all the same, so the budget and the total must count it."""
        with self._lock:
            wasted, self._wasted_usd = self._wasted_usd, 0.0
        return wasted

    def _waste(self, rental: Rental, final_usd: float | None) -> None:
        if final_usd is None:  # the API reported no spend: our own estimate
            final_usd = rental.estimated_cost(self.clock.time()).total_usd
        with self._lock:
            self._wasted_usd += final_usd

    # -- the pool ------------------------------------------------------------------------

    def worst_case_usd(self, job: Job, offer: Offer) -> float:
        """The most renting `offer` for `job` can cost: billed from the create, through the
        start (image pull included) and the job's whole timeout, creation fee included."""
        spot = job.gpu is not None and job.gpu.spot
        price_per_day = self.price_per_day(job, offer)  # a spot bid, not the minimum
        if price_per_day is None:
            price = offer.usd_per_hour(spot) or 0.0  # no bid fits: renting will skip the offer
        else:
            price = self.usd_per_hour(offer, price_per_day, spot)
        # The core's own figure for the rental (its budget reserves the same): plan, run and
        # a pool all count one worst case.
        hold_s = worst_hold_s(self.image_allowance_s(job), job)
        fee_usd = self.creation_fee_usd(offer, spot)
        return money.worst_case_usd(price, hold_s, fee_usd, bill.CREATION_FEE_GRACE_S)

    def boot_timeout_s(self, job: Job) -> float:
        """How long `job`'s order may take to be deployed (online, its image pulled) before
        it is given up: the longest a boot is held, which every worst case counts."""
        return self.bounds(job).allowance_s

    def image_allowance_s(self, job: Job) -> float:
        """The boot every rent of a book is budgeted for, the job's own bound aside: online
        within the online bound, plus what `job`'s image's pull may add (the core's
        `boot_allowance_s` then takes the job's own bound where longer)."""
        image, options = job.image or DEFAULT_IMAGE, self.options
        return image_allowance_s(
            self.pulls, image, options.online_timeout_s, options.deploy_timeout_s
        )

    def bounds(self, job: Job) -> BootBounds:
        """When a boot of `job` is given up: not online within the online bound (a dead
        host), or not deployed within what its image's pulls allow; the job's own
        `boot-timeout-minutes` wins over both."""
        image = job.image or DEFAULT_IMAGE
        bounds = boot_bounds(self.pulls, image, self.options.online_timeout_s, job.boot_timeout_s)
        if self.options.deploy_timeout_s is not None:
            bounds = replace(bounds, deploy_s=self.options.deploy_timeout_s)
        return bounds

    def _reserve(self, job: Job, offer: Offer, cancel: threading.Event) -> Reservation | None:
        """The rental's worst case from the pool, as the run's own budget counts it."""
        if self.seat is None or self.price_per_day(job, offer) is None:
            return None
        label = f"{self.run_id}/{job.id} server {offer.server_id}"
        worst_usd = self.worst_case_usd(job, offer)
        return self.seat.reserve(worst_usd, label, cancel, self.make_room, job_id=job.id)

    def cover(self, rental: Rental, job: Job) -> bool:
        """Can a kept server take `job`? Its reservation must grow by the job's worst case."""
        if self.seat is None or rental.reservation is None:
            return True
        extra_usd = rental.usd_per_hour * job.timeout_s / 3600
        return self.seat.grow(rental.reservation, extra_usd, job_id=job.id)

    def _settle_pool(self, reservation: Reservation | None, billed_usd: float) -> None:
        if reservation is not None and self.seat is not None:
            self.seat.settle(reservation, billed_usd)

    def close_pool(self) -> None:
        """Leave the pool (idempotent): anything unsettled is left to a reaper."""
        seat, self.seat = self.seat, None
        if seat is not None:
            seat.close()

    # -- steps -----------------------------------------------------------------------------

    def price_per_day(self, job: Job, offer: Offer) -> float | None:
        """What renting `offer` for `job` costs per day, listed (spot_bids)."""
        return self.bids.price_per_day(job, offer)

    def usd_per_hour(self, offer: Offer, price_per_day: float, spot: bool = False) -> float:
        """USD per hour of a rental at `price_per_day` listed, the renter's fee included."""
        return self.bids.usd_per_hour(offer, price_per_day, spot)

    def creation_fee_usd(self, offer: Offer, spot: bool) -> float:
        return self.fees().creation_fee_usd(spot, offer.usd_per_unit)

    def known_rival_bids(self, server_id: int) -> tuple[float, ...]:
        """The rivals' bids on `server_id` as last read; never calls the API."""
        return self.bids.known_rival_bids(server_id)

    def _intent(self, job: Job, offer: Offer) -> Rental:
        price_per_day = self.price_per_day(job, offer)
        if price_per_day is None:
            raise SkipOffer(f"server {offer.server_id}: no spot bid fits the price cap")
        spot = job.gpu is not None and job.gpu.spot
        usd_per_hour = self.usd_per_hour(offer, price_per_day, spot)
        rental_id = self.ledger.record_intent(
            self.run_id,
            job.id,
            offer.server_id,
            price_per_day,
            self.currency,
            usd_per_hour,
            image=job.image or DEFAULT_IMAGE,
            spot=spot,
        )
        rental = Rental(rental_id, job.id, offer, price_per_day, self.currency, usd_per_hour)
        rental.spot = spot
        rental.fee_rate = offer.fee_rate(spot)
        rental.max_usd_per_hour = job.gpu.max_usd_per_hour if job.gpu else None
        return rental

    def _create(self, rental: Rental, job: Job, cancel: threading.Event) -> Order:
        try:
            try:
                return self._send_create(rental, job, cancel)
            except api_errors.TooLowPriceError:
                # A bid under a new rival or minimum was refused, renting nothing: bid again
                # from a fresh book, once, if the cap allows a higher bid.
                if not rental.spot or not self.bids.rebid_for_create(rental, job):
                    raise
                return self._send_create(rental, job, cancel)
        except RequestAborted:
            # Given up while waiting for the create's rate-limit slot: nothing was sent.
            self.ledger.set_state(rental.rental_id, "failed", "cancelled before the create")
            self._settle_pool(rental.reservation, 0.0)
            raise ProvisionCancelled(f"server {rental.offer.server_id}: cancelled") from None
        except _FATAL as exc:
            self.ledger.set_state(rental.rental_id, "failed", str(exc))
            self._settle_pool(rental.reservation, 0.0)
            raise RunMustStop(str(exc)) from None
        except api_errors.OrderOutcomeUnknownError as exc:
            if exc.accepted or exc.maybe_ours:
                raise self._unproven(rental, exc) from None
            self.ledger.set_state(rental.rental_id, "intent", str(exc))
            raise SkipOffer(f"server {rental.offer.server_id}: {exc}") from None
        except api_errors.CloreApiError as exc:
            if may_have_created(exc):
                # Maybe billed, though not found yet: the intent stays open for `cleanup`,
                # which looks again; `failed` would hide a server that shows up later.
                self.ledger.set_state(rental.rental_id, "intent", str(exc))
            else:
                self.ledger.set_state(rental.rental_id, "failed", str(exc))
                self._settle_pool(rental.reservation, 0.0)
            raise SkipOffer(f"server {rental.offer.server_id}: {exc}") from None

    def _unproven(
        self, rental: Rental, exc: api_errors.OrderOutcomeUnknownError
    ) -> InfrastructureError:
        """A create that made an order (it was accepted, or one on its server may be ours)
        whose order could not be proven ours, even looking longer. It is not cancelled (only
        proof makes an order ours) nor dropped: the row stays open with the verdict and its
        reason, the run names it at its end and exits 3. After an accepted create the API's
        listing itself fails us, and renting on would only leave more orders like it: the run
        stops. After a create that failed (HTTP 500, say), the failure is the create's own:
        the job moves to the next host."""
        server = rental.offer.server_id
        maybe = ", ".join(map(str, exc.maybe_ours))
        what = "accepted" if exc.accepted else "answered with an error"
        named = f"order {maybe} may be ours" if maybe else "its order is not listed yet"
        line = (
            f"server {server}: the create was {what} but no order was proven ours ({named}); "
            f"it may be running and billed (run {self.run_id})"
        )
        self.ledger.set_state(rental.rental_id, "intent", f"unproven: {exc}")
        self.ledger.record_verdict(
            rental.rental_id, "unproven", f"{exc.message}; {exc.why}".rstrip("; "), maybe or None
        )
        hint = _cancel_hint(self.run_id)
        with self._lock:
            self.unproven.append((line, hint))
        return RunMustStop(line, hint) if exc.accepted else SkipOffer(line, hint)

    def _send_create(self, rental: Rental, job: Job, cancel: threading.Event) -> Order:
        """One create, with the ledger's ownership marks; the orders the ledger's other
        rentals hold are not this create's to adopt."""
        taken = {o for r in self.ledger.unreleased() if (o := order_of(r)) is not None}
        marks = LedgerMarks(self.ledger, rental.rental_id)
        request = self._request(rental, job)
        rental.tag = request.tag
        return self.client.create_order(request, abort=cancel, journal=marks, taken=taken)

    def _request(self, rental: Rental, job: Job) -> OrderRequest:
        return OrderRequest(
            server_id=rental.offer.server_id,
            image=job.image or DEFAULT_IMAGE,
            currency=self.currency,
            spot_price_per_day=rental.price_per_day if rental.spot else None,
            ssh_key=self.key.public_line,
            autossh_entrypoint=not image_runs_sshd(job),
        )

    def _boots(self) -> BootWatch:
        """The boot watch, with the provisioner's settings as they are now."""
        return BootWatch(self.client, self.clock, self.options, self.bids, self.key, self.host_keys)

    def _wait_deployed(
        self,
        order_id: int,
        cancel: threading.Event,
        rental: Rental,
        bounds: BootBounds,
        deploying: Callable[[], None] | None = None,
    ) -> Order:
        """The order deployed (boot_watch), or the SkipOffer that says why not."""
        return self._boots().wait_deployed(order_id, cancel, rental, bounds, deploying)

    def win_back(self, rental: Rental, cancel: threading.Event) -> tuple[bool, str]:
        """A spot rental whose job lost its server: if the order was outbid, raise the bid on
        it within the job's cap and reconnect once it is back online. Returns (won back?, what
        happened, for the job's log); not won back, the job moves to another host.

        Why the job is not saved, only the server: when a spot order is outbid, Clore ends the
        rental with no notice and stops billing it (the container stops, the job dies with it),
        while the order stays listed, offline, as "Outbid" until its bid wins again. So the bid
        goes up on the same order, and the job's retry runs on the same host. An order that
        left `my_orders` or is `expired` has ended for good: nothing to bid on."""
        order_id, outbid_at = rental.order_id, self.clock.time()  # about when the job died
        if not rental.spot or order_id is None or cancel.is_set():
            return False, ""
        try:
            order = next((o for o in self.client.my_orders() if o.id == order_id), None)
            if order is None or order.expired or not self.bids.outbid(rental):
                return False, ""  # ended, or not outbid: the server is lost for another reason
            before = rental.price_per_day
            self.bids.raise_bid(rental, order_id, outbid_at)
            boots = self._boots()
            conn = boots.connect(boots.wait_online(order_id, cancel, rental), cancel)
        except InfrastructureError as exc:  # the API's errors, SkipOffer, a cancel
            return False, f"{exc}; moving to another host"
        if rental.conn is not None:
            rental.conn.close()
        rental.conn = conn
        return True, (
            f"order {order_id} outbid on server {rental.offer.server_id}: bid raised from "
            f"{before:g} to {rental.price_per_day:g} {rental.currency}/day "
            f"({rental.usd_per_hour:.4f} $/h with the renter fee); retrying on the same server"
        )

    def _note_fee(self, rental: Rental, order: Order) -> None:
        """The creation fee the order carries, or the account's for its type."""
        native = order.creation_fee
        if native is None:
            native = self.fees().creation_fee_native(rental.spot)
        rental.creation_fee_native = native or 0.0
        rental.creation_fee_usd = rental.creation_fee_native * rental.usd_per_unit

    # -- giving back -----------------------------------------------------------------------

    def release(self, rental: Rental) -> float | None:
        """Cancel the order and confirm it is gone. Returns its final cost in USD when the API
        reported it (`spend`), else None. Never raises: what stays unconfirmed stays in the
        ledger as `releasing`, for `clore-run cleanup`."""
        return self.release_all([rental]).get(rental.rental_id)

    def release_all(
        self, rentals: list[Rental], within_s: float | None = None
    ) -> dict[int, float | None]:
        """Cancel every order, then confirm them together (order_release): each one's final
        cost in USD where the API reported it."""
        return self._releaser().release_all(rentals, within_s)

    def send_cancel(self, rental: Rental) -> bool:
        """Cancel the order of a rental still being set up, if it is known, without waiting
        for its confirmation (its rent's own thread confirms it, and settles its cost)."""
        if rental.order_id is None:
            return False
        releaser = self._releaser()
        releaser.note(rental, "releasing")
        return releaser.cancel(rental)

    def _releaser(self) -> Releaser:
        """The give-back, with the provisioner's ledger and settings as they are now."""
        return Releaser(
            self.client,
            self.ledger,
            self.clock,
            self.options,
            self.hurry,
            self._cancels,
            self._settle_pool,
        )
