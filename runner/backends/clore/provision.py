"""One rental's life: ledger intent -> create_order -> online -> SSH -> ... -> cancel -> confirmed.

Every step that can cost money is written to the ledger first, and every failure after the order
exists cancels it before the error leaves this module. A host that fails for a reason of its own
raises `SkipOffer` (the caller excludes it and tries the next offer); reasons that doom every
offer raise `RunMustStop`.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runner.backends.base import NO_STAGES, StageSink
from runner.backends.clore import bill
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient, OrderRequest
from runner.backends.clore.fees import FeeSchedule, read_fee_schedule
from runner.backends.clore.market import Offer, per_hour, spot_bid_per_day
from runner.backends.clore.models import Order, SpotMarket
from runner.backends.clore.order_create import may_have_created
from runner.backends.clore.ownership import LedgerMarks, order_of, read_echo, record_order
from runner.backends.clore.ratelimit import RequestAborted
from runner.backends.clore.settings import DEFAULT_IMAGE as DEFAULT_IMAGE  # its old home
from runner.backends.clore.settings import image_runs_sshd
from runner.backends.ssh.connection import ConnectOptions, Endpoint, SshConnection, connect
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock
from runner.core import money
from runner.core.model import Job
from runner.core.pulls import BootBounds, Pulls, boot_bounds
from runner.core.rental_length import worst_hold_s
from runner.errors import InfrastructureError, RunMustStop
from runner.stores.ledger import LedgerError, RentalLedger, State
from runner.stores.pools import Reservation

if TYPE_CHECKING:  # psycopg is an extra: only a run that joins a pool imports it
    from runner.stores.pools.seat import PoolSeat

_FATAL = (api_errors.NotEnoughBalanceError, api_errors.InvalidTokenError)
SPOT_BOOK_TTL_S = 30.0  # a server's spot book read for the budget check serves the create too
MAX_REBIDS = 3  # raises of one spot order's bid before the job moves to another host


class SkipOffer(InfrastructureError):
    """This host failed for a reason of its own: exclude it and try the next offer."""


class NeverOnline(SkipOffer):
    """The order did not come online within the boot bound (the host history keeps it)."""


class SshNeverAnswered(SkipOffer):
    """The order came online but its sshd never answered (the host history keeps it)."""


class StillPulling(SkipOffer):
    """The order came online, but its container was still deploying (its image pulling) when
    the deploy bound ran out: the image's time, not the host's fault. The host history keeps
    it as a pull of at least `pull_s`, never as a failed boot."""

    def __init__(self, message: str, image: str, pull_s: float) -> None:
        super().__init__(message)
        self.image = image
        self.pull_s = pull_s


class ProvisionCancelled(InfrastructureError):
    """The run was cancelled while this rental was being set up (the order is cancelled)."""


class CancelledBooting(ProvisionCancelled):
    """Cancelled while its order booted: how long it had, and how far it got (online, its
    image pulling for `pulled_s`), so that a hedge's loser is remembered as what it was."""

    def __init__(self, message: str, waited_s: float, pulled_s: float | None, image: str) -> None:
        super().__init__(message)
        self.waited_s = waited_s
        self.pulled_s = pulled_s  # None: not online yet
        self.image = image


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


def _wait_on_event(seconds: float, cancel: threading.Event) -> None:
    cancel.wait(seconds)


@dataclass(frozen=True)
class ProvisionOptions:
    # Create -> online, image pull included, unless the job sets `boot-timeout-minutes`.
    # (bill.DEFAULT_BOOT_BOUND_S: inside the creation fee's grace, the SSH probe included.)
    online_timeout_s: float = bill.DEFAULT_BOOT_BOUND_S
    first_poll_s: float = 3.0  # my_orders polling backoff (the rate limiter spaces it further)
    max_poll_s: float = 30.0
    ssh: ConnectOptions = field(
        # 8 tries: at most ~3 minutes after "online", so a host whose sshd never answers is
        # given up before the creation fee's 10 minutes.
        default_factory=lambda: ConnectOptions(tries=8, backoff_s=2.0, max_backoff_s=20.0)
    )
    # A cancelled order can stay listed for a few seconds: confirm it is gone with backoff
    # for this long before calling it unconfirmed. A shutdown on a signal has GitHub's 7.5 s
    # in all, so it confirms for less and leaves the rest to the cleanup step.
    confirm_within_s: float = 30.0
    shutdown_confirm_within_s: float = 4.0
    # A run stopped by a signal waits this long, from the signal, for rents under way: a
    # create already sent is answered, its order found and cancelled, before CI's SIGKILL
    # (10 s after its SIGINT). One not sent by then is given up at once.
    signal_setup_within_s: float = 9.0
    first_confirm_pause_s: float = 1.0
    # How to pause between polls: the real clock waits on the cancel event; tests pass their
    # fake clock's sleep so nothing waits real seconds.
    pause: Callable[[float, threading.Event], None] = _wait_on_event
    # What an image's pull may add to `online_timeout_s`. None: what the host history says of
    # the image's pulls (runner/core/pulls.py), a generous default for an image never seen.
    deploy_timeout_s: float | None = None


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
    image: str = ""  # the image its order runs (the host history keeps its pulls)
    facts: dict[str, str] = field(default_factory=dict)
    fee_rate: float = 0.0  # the renter's fee on top of the listed price (in `usd_per_hour`)
    creation_fee_native: float = 0.0
    cancelled_at: float | None = None  # unix seconds of the first cancel sent
    # A cancel went out (the API took it): whoever knows the order first sends it, the
    # run's shutdown or the rent's own thread, and the other does not send it again.
    cancel_sent: bool = False
    tag: int | None = None  # the tag the last create carried (the ownership proof)
    skipped: list[str] = field(default_factory=list)  # hosts tried before this one, and why
    max_usd_per_hour: float | None = None  # the job's cap, fee included: bids stay under it
    # How long the order lived by the API's stamps (`order_end - ct`), once it has ended: an
    # order that ended by itself (expired, preempted, its host gone) before our cancel was
    # billed up to its own end, not up to when we noticed.
    ended_lived_s: float | None = None
    # What the shares billed on our own clock add up to (None: nothing billed yet), and the
    # order's cost as the API billed it, once it is known.
    billed_usd: float | None = None
    order_cost: bill.BilledCost | None = None

    @property
    def usd_per_unit(self) -> float:
        return self.offer.usd_per_unit or 0.0

    def lived_s(self, now_unix: float) -> float:
        if self.ended_lived_s is not None:  # the API's own stamps, once the order has ended
            return self.ended_lived_s
        end = self.cancelled_at if self.cancelled_at is not None else now_unix
        return max(0.0, end - self.held_since)

    def billed_cost(self, spend_native: float, now_unix: float) -> bill.BilledCost:
        """What the order cost as the wallet loses it, from the API's `spend`."""
        return bill.billed_cost(
            spend_native,
            self.usd_per_unit,
            self.fee_rate,
            self.creation_fee_native,
            self.lived_s(now_unix),
        )

    def estimated_cost(self, now_unix: float) -> bill.BilledCost:
        """Our own figure, for when the API reports no `spend`."""
        held_s = self.lived_s(now_unix)
        return bill.estimated_cost(self.usd_per_hour, held_s, self.fee_rate, self.creation_fee_usd)


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
    _books: dict[int, tuple[float, tuple[float, ...]]] = field(default_factory=dict, init=False)
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
            rental.conn = self._connect(order, cancel)
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
        image = job.image or DEFAULT_IMAGE
        deploy_s = self.options.deploy_timeout_s
        if deploy_s is None:
            deploy_s = self.pulls.deploy_bound_s(image)
        return self.options.online_timeout_s + deploy_s

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
        """What renting `offer` for `job` will cost per day in the order currency, listed
        (the fee comes on top): the spot bid, a few percent over the highest rival bid in the
        server's spot book (None when no bid fits the cap), or the on-demand price."""
        if job.gpu is not None and job.gpu.spot:
            rivals = self._rival_bids(offer.server_id)
            return spot_bid_per_day(offer, job.gpu.max_usd_per_hour, rivals)
        return offer.on_demand_price_per_day or 0.0

    def usd_per_hour(self, offer: Offer, price_per_day: float, spot: bool = False) -> float:
        """USD per hour of a rental at `price_per_day` listed, the renter's fee included."""
        listed = per_hour(price_per_day) * (offer.usd_per_unit or 0.0)
        return bill.with_fee_per_hour(listed, offer.fee_rate(spot))

    def creation_fee_usd(self, offer: Offer, spot: bool) -> float:
        return self.fees().creation_fee_usd(spot, offer.usd_per_unit)

    def known_rival_bids(self, server_id: int) -> tuple[float, ...]:
        """The active bids of others on `server_id` as last read from its spot book, however
        old; none if it was never read. Never calls the API (the core's loop prices with it)."""
        with self._lock:
            cached = self._books.get(server_id)
        return cached[1] if cached is not None else ()

    def _rival_bids(self, server_id: int, fresh: bool = False) -> tuple[float, ...]:
        """The active bids of others on `server_id` in our currency, per day. A book that
        cannot be read leaves the bid at the spot minimum: the create then says if it is low."""
        now = self.clock.now()
        with self._lock:
            cached = self._books.get(server_id)
        if cached is not None and not fresh and now - cached[0] < SPOT_BOOK_TTL_S:
            return cached[1]
        try:
            book = self.client.spot_marketplace(server_id)
        except api_errors.CloreApiError:
            return ()
        return self._keep_book(server_id, book)

    def _keep_book(self, server_id: int, book: SpotMarket) -> tuple[float, ...]:
        bids = tuple(
            o.bid
            for o in book.offers
            if o.active and not o.my and o.bid is not None and o.currency in (None, self.currency)
        )
        with self._lock:
            self._books[server_id] = (self.clock.now(), bids)
        return bids

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
                if not rental.spot or not self._rebid_for_create(rental, job):
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

    def _rebid_for_create(self, rental: Rental, job: Job) -> bool:
        self._rival_bids(rental.offer.server_id, fresh=True)
        bid = self.price_per_day(job, rental.offer)
        if bid is None or bid <= rental.price_per_day:
            return False
        self._set_price(rental, bid)
        return True

    def _set_price(self, rental: Rental, price_per_day: float) -> None:
        """The rental's new bid (the ledger keeps the first: cleanup matches on the order)."""
        rental.price_per_day = price_per_day
        rental.usd_per_hour = self.usd_per_hour(rental.offer, price_per_day, rental.spot)

    def _wait_online(
        self,
        order_id: int,
        cancel: threading.Event,
        rental: Rental | None = None,
        within_s: float | None = None,
    ) -> Order:
        within_s = self.options.online_timeout_s if within_s is None else within_s
        deadline = self.clock.now() + within_s
        delay = self.options.first_poll_s
        rebids = 0
        while True:
            if cancel.is_set():
                raise ProvisionCancelled(f"order {order_id}: cancelled while starting")
            order = next((o for o in self.client.my_orders() if o.id == order_id), None)
            if order is None or order.expired:
                raise SkipOffer(f"order {order_id} ended before it came online")
            if order.ready:
                return order
            if rental is not None and rental.spot and self._outbid(rental):
                if rebids >= MAX_REBIDS:
                    raise SkipOffer(f"order {order_id}: outbid again after {rebids} raises")
                self._raise_bid(rental, order_id)
                rebids += 1
            if self.clock.now() >= deadline:
                raise NeverOnline(f"order {order_id} not online after {within_s:g} s")
            self.options.pause(delay, cancel)
            delay = min(delay * 1.5, self.options.max_poll_s)

    def _wait_deployed(
        self,
        order_id: int,
        cancel: threading.Event,
        rental: Rental,
        bounds: BootBounds,
        deploying: Callable[[], None] | None = None,
    ) -> Order:
        """Wait for the order through its phases: listed, online (its container deploying:
        the image pulls), deployed. Given up as `NeverOnline` when it is not online within
        its bound (a dead host), as `StillPulling` when it is online but not deployed within
        its image's (nobody's fault). The times land in the rental's facts."""
        started = self.clock.now()
        online_at: float | None = None
        delay = self.options.first_poll_s
        rebids = 0
        while True:
            if cancel.is_set():
                now = self.clock.now()
                raise CancelledBooting(
                    f"order {order_id}: cancelled while starting",
                    now - started,
                    None if online_at is None else now - online_at,
                    rental.image,
                )
            order = next((o for o in self.client.my_orders() if o.id == order_id), None)
            if order is None or order.expired:
                raise SkipOffer(f"order {order_id} ended before it came online")
            now = self.clock.now()
            if order.online and online_at is None:
                online_at = now
                rental.facts["online_after_s"] = f"{now - started:.1f}"
                if deploying is not None:
                    deploying()
            if order.ready:
                assert online_at is not None  # ready is online
                rental.facts["deployed_after_s"] = f"{now - started:.1f}"
                rental.facts["pull_s"] = f"{now - online_at:.1f}"
                return order
            if rental.spot and self._outbid(rental):
                if rebids >= MAX_REBIDS:
                    raise SkipOffer(f"order {order_id}: outbid again after {rebids} raises")
                self._raise_bid(rental, order_id)
                rebids += 1
            waited_s = now - started
            verdict = bounds.give_up(waited_s, online_at is not None)
            if verdict == "never_up":
                raise NeverOnline(f"order {order_id} not online after {bounds.online_s:g} s")
            if verdict == "pulling":
                assert online_at is not None
                pulled_s = now - online_at
                raise StillPulling(
                    f"order {order_id}: its container still deploying (the image "
                    f"{rental.image} pulling) {pulled_s:.0f} s after it came online",
                    rental.image,
                    pulled_s,
                )
            # Polls back off, but never past the bound: a dead host is given up when due.
            due_s = bounds.allowance_s if online_at is not None else bounds.online_s
            self.options.pause(max(0.1, min(delay, due_s - waited_s)), cancel)
            delay = min(delay * 1.5, self.options.max_poll_s)

    def _outbid(self, rental: Rental) -> bool:
        """A spot order not up yet whose bid a rival's matches or beats has lost the server
        until the bid is raised."""
        rivals = self._rival_bids(rental.offer.server_id, fresh=True)
        return any(bid >= rental.price_per_day for bid in rivals)

    def _raise_bid(self, rental: Rental, order_id: int, outbid_at: float | None = None) -> None:
        """Bid over the rivals again with `set_spot_price`, within the job's cap (fee
        included); raising is not limited by the API's step or its 600 s lowering rule.
        `outbid_at` (unix; default now) is when the order lost the server."""
        outbid_at = self.clock.time() if outbid_at is None else outbid_at
        ask = rental.max_usd_per_hour
        bid = spot_bid_per_day(rental.offer, ask, self._rival_bids(rental.offer.server_id))
        if bid is None or bid <= rental.price_per_day:
            raise SkipOffer(
                f"order {order_id}: outbid, and no higher bid fits the "
                f"{ask or 0:.3f} $/h cap (renter fee included)"
            )
        try:
            try:
                bid = self._send_bid(rental, order_id, bid)
            except api_errors.TooLowPriceError:
                # The host's spot minimum rose over the bid: price it from a fresh book, once.
                bid = self._send_bid(rental, order_id, self._bid_over_new_minimum(rental))
        except api_errors.CloreApiError as exc:
            raise SkipOffer(f"order {order_id}: outbid; raising the bid failed: {exc}") from None
        before_usd_per_hour = rental.usd_per_hour
        self._set_price(rental, bid)
        self._rebill(rental, before_usd_per_hour, outbid_at)

    def _send_bid(self, rental: Rental, order_id: int, bid: float) -> float:
        """`set_spot_price`; returns the bid the order now has."""
        try:
            self.client.set_spot_price(order_id, bid)
        except api_errors.ExceededMaxStepError as exc:
            # Documented for lowering only; should a raise meet it, go up one step now
            # and let the next look at the book decide whether that is enough.
            if not exc.max_step or exc.max_step <= 0:
                raise
            # Rounded down, so that float error cannot make it a hair over the step.
            step = exc.max_step * (1 - 1e-6)
            bid = math.floor((rental.price_per_day + step) * 1e8) / 1e8
            self.client.set_spot_price(order_id, bid)
        return bid

    def _bid_over_new_minimum(self, rental: Rental) -> float:
        """The bid over the server's spot minimum as its book says it now (the offer keeps the
        new one, so the price cap is checked against it too), or SkipOffer."""
        offer = rental.offer
        book = self.client.spot_marketplace(offer.server_id)
        floor = book.server.min_pricing.get(self.currency)
        if floor is not None and floor > 0 and offer.usd_per_unit is not None:
            listed_usd_per_hour = per_hour(floor) * offer.usd_per_unit
            rental.offer = replace(
                offer,
                spot_min_price_per_day=floor,
                spot_usd_per_hour=bill.with_fee_per_hour(listed_usd_per_hour, offer.spot_fee_rate),
            )
        ask = rental.max_usd_per_hour
        bid = spot_bid_per_day(rental.offer, ask, self._keep_book(offer.server_id, book))
        if bid is None or bid <= rental.price_per_day:
            raise SkipOffer(
                f"order {rental.order_id}: the server's spot minimum rose to {floor} "
                f"{self.currency}/day; no bid over it fits the {ask or 0:.3f} $/h cap"
            )
        return bid

    def _rebill(self, rental: Rental, before_usd_per_hour: float, outbid_at: float) -> None:
        """After a raise, the next bill (`usd_per_hour` x the time since `billed_until`) must
        still charge the time before the outbid at the old bid, and none of the outbid stretch
        up to now: Clore bills no time while an order is outbid. So `billed_until` moves to
        where the new price over the time since charges exactly that."""
        now = self.clock.time()
        owed_s = max(0.0, outbid_at - rental.billed_until)
        if rental.usd_per_hour > 0:
            owed_s *= before_usd_per_hour / rental.usd_per_hour
        rental.billed_until = now - owed_s

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
            if order is None or order.expired or not self._outbid(rental):
                return False, ""  # ended, or not outbid: the server is lost for another reason
            before = rental.price_per_day
            self._raise_bid(rental, order_id, outbid_at)
            conn = self._connect(self._wait_online(order_id, cancel, rental), cancel)
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

    def _connect(self, order: Order, cancel: threading.Event) -> SshConnection:
        endpoint = order.ssh_endpoint
        assert endpoint is not None  # order.ready guarantees it
        host, port = endpoint
        # connect() waits in real time, on its options' clock (not this one, which tests speed
        # up: the server's sshd does not), so its length is measured on that clock too.
        ssh = self.options.ssh
        started = ssh.clock.now()
        try:
            return connect(Endpoint(host, port, "root"), self.key, self.host_keys, ssh, cancel)
        except InfrastructureError as exc:
            if cancel.is_set():
                raise ProvisionCancelled(str(exc)) from None
            waited_s = ssh.clock.now() - started
            raise SshNeverAnswered(
                f"sshd never answered on {host}:{port} after {waited_s:.0f} s "
                f"(order {order.id} on server {order.si}; {exc.message})"
            ) from None

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
        """Cancel every order first, then confirm them together: with one API call a second,
        a shutdown that confirmed each order in turn would not end within GitHub's 7.5 s.
        An order can stay listed a few seconds after its cancel, so the check is repeated with
        backoff for `within_s` (default `confirm_within_s`) before it counts as unconfirmed.
        Each rental's final cost, in its parts, lands in its `facts` (`order_*_usd`)."""
        finals: dict[int, float | None] = {}
        waiting: dict[int, Rental] = {}
        for rental in rentals:
            if rental.conn is not None:
                rental.conn.close()
            finals[rental.rental_id] = None
            if rental.order_id is not None:
                self._note(rental, "releasing")
                waiting[rental.order_id] = rental
        unsent = {order_id for order_id, rental in waiting.items() if not self._cancel(rental)}
        window_s = self.options.confirm_within_s if within_s is None else within_s
        deadline = self.clock.now() + window_s
        pause_s = self.options.first_confirm_pause_s
        while waiting:
            for order_id, gone, order in self._check(list(waiting)):
                rental = waiting[order_id]
                spend = self._ended_spend(rental, order) if gone else None
                if spend is None and order is not None:
                    spend = order.spend
                if spend is not None:
                    finals[rental.rental_id] = self._settle(rental, spend)
                if gone:
                    self._note(rental, "released")
                    self._settle_pool(rental.reservation, self._final_usd(rental, finals))
                    del waiting[order_id]
            if not waiting or self.clock.now() + pause_s > deadline or self.hurry.is_set():
                break
            self.options.pause(pause_s, self.hurry)
            pause_s = min(pause_s * 2, 8.0)
            unsent = {i for i in unsent if i in waiting and not self._cancel(waiting[i])}
        return finals

    def _final_usd(self, rental: Rental, finals: dict[int, float | None]) -> float:
        final = finals.get(rental.rental_id)
        if final is not None:
            return final
        return rental.estimated_cost(self.clock.time()).total_usd  # no `spend`: our estimate

    def _settle(self, rental: Rental, spend_native: float) -> float:
        rental.order_cost = rental.billed_cost(spend_native, self.clock.time())
        return rental.order_cost.total_usd

    def _note(self, rental: Rental, state: State) -> None:
        """A ledger write while giving back: a failing ledger must not stop the cancels (the
        row stays open, and `clore-run cleanup` finds the order ended)."""
        with contextlib.suppress(LedgerError):
            self.ledger.set_state(rental.rental_id, state)

    def send_cancel(self, rental: Rental) -> bool:
        """Cancel the order of a rental still being set up, if it is known, without waiting
        for its confirmation (its rent's own thread confirms it, and settles its cost)."""
        if rental.order_id is None:
            return False
        self._note(rental, "releasing")
        return self._cancel(rental)

    def _cancel(self, rental: Rental) -> bool:
        """Send the cancel, once; False when it failed (it is sent again while confirming).
        Already ended, or a hiccup: the my_orders check decides."""
        assert rental.order_id is not None
        with self._cancels:
            if rental.cancel_sent:
                return True
            rental.cancel_sent = True  # taken: another thread does not send it too
            if rental.cancelled_at is None:
                rental.cancelled_at = self.clock.time()  # billing stops about now
        try:
            self.client.cancel_order(rental.order_id, abort=self.hurry)
        except (api_errors.CloreApiError, RequestAborted):
            with self._cancels:
                rental.cancel_sent = False
            return False
        return True

    def _check(self, order_ids: list[int]) -> list[tuple[int, bool, Order | None]]:
        """(order id, gone?, the order as listed) for each, from one my_orders call."""
        try:
            orders = {o.id: o for o in self.client.my_orders(return_completed=True)}
        except api_errors.CloreApiError:
            return []
        out: list[tuple[int, bool, Order | None]] = []
        for order_id in order_ids:
            order = orders.get(order_id)
            out.append((order_id, order is None or bool(order.expired), order))
        return out

    def _ended_spend(self, rental: Rental, order: Order | None) -> float | None:
        """What an ended order billed at its listed price (native), up to its own end; its
        lifetime by the API's stamps is kept on the rental (the creation fee hangs on it)."""
        if order is None:
            return None
        price = order.price or rental.price_per_day
        start = min(order.ct, rental.held_since) if order.ct is not None else None
        lived_s = bill.ended_lived_s(start, order.order_end, order.spend, price)
        if order.order_end is not None and lived_s is not None:
            rental.ended_lived_s = lived_s
        return bill.ended_spend_native(order.spend, price, lived_s, rental.spot)
