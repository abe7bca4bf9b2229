"""What a rental bids, and raising it: the price per day of an offer for a job (a spot bid over
the rivals in the server's spot book, within the job's cap, or the on-demand price), the spot
books read, and a spot order outbid raised again.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace

from runner.backends.clore import bill
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.market import Offer, per_hour, spot_bid_per_day
from runner.backends.clore.models import SpotMarket
from runner.backends.clore.rental import Rental, SkipOffer
from runner.clock import Clock
from runner.core.model import Job

SPOT_BOOK_TTL_S = 30.0  # a server's spot book read for the budget check serves the create too


class SpotBids:
    """Prices and bids in `currency`, from spot books read through `client`."""

    def __init__(self, client: CloreClient, clock: Clock, currency: str) -> None:
        self.client = client
        self.clock = clock
        self.currency = currency
        self._lock = threading.Lock()
        self._books: dict[int, tuple[float, tuple[float, ...]]] = {}  # server -> (read at, bids)

    def price_per_day(self, job: Job, offer: Offer) -> float | None:
        """What renting `offer` for `job` will cost per day in the order currency, listed
        (the fee comes on top): the spot bid, a few percent over the highest rival bid in the
        server's spot book (None when no bid fits the cap), or the on-demand price."""
        if job.gpu is not None and job.gpu.spot:
            rivals = self.rival_bids(offer.server_id)
            return spot_bid_per_day(offer, job.gpu.max_usd_per_hour, rivals)
        return offer.on_demand_price_per_day or 0.0

    @staticmethod
    def usd_per_hour(offer: Offer, price_per_day: float, spot: bool = False) -> float:
        """USD per hour of a rental at `price_per_day` listed, the renter's fee included."""
        listed = per_hour(price_per_day) * (offer.usd_per_unit or 0.0)
        return bill.with_fee_per_hour(listed, offer.fee_rate(spot))

    def known_rival_bids(self, server_id: int) -> tuple[float, ...]:
        """The active bids of others on `server_id` as last read from its spot book, however
        old; none if it was never read. Never calls the API (the core's loop prices with it)."""
        with self._lock:
            cached = self._books.get(server_id)
        return cached[1] if cached is not None else ()

    def rival_bids(self, server_id: int, fresh: bool = False) -> tuple[float, ...]:
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

    def rebid_for_create(self, rental: Rental, job: Job) -> bool:
        """A create refused as bidding too low: bid again from a fresh book, if the cap
        allows a higher bid (True: the rental bids that now)."""
        self.rival_bids(rental.offer.server_id, fresh=True)
        bid = self.price_per_day(job, rental.offer)
        if bid is None or bid <= rental.price_per_day:
            return False
        self._set_price(rental, bid)
        return True

    def _set_price(self, rental: Rental, price_per_day: float) -> None:
        """The rental's new bid (the ledger keeps the first: cleanup matches on the order)."""
        rental.price_per_day = price_per_day
        rental.usd_per_hour = self.usd_per_hour(rental.offer, price_per_day, rental.spot)

    def outbid(self, rental: Rental) -> bool:
        """A spot order not up yet whose bid a rival's matches or beats has lost the server
        until the bid is raised."""
        rivals = self.rival_bids(rental.offer.server_id, fresh=True)
        return any(bid >= rental.price_per_day for bid in rivals)

    def raise_bid(self, rental: Rental, order_id: int, outbid_at: float | None = None) -> None:
        """Bid over the rivals again with `set_spot_price`, within the job's cap (fee
        included); raising is not limited by the API's step or its 600 s lowering rule.
        `outbid_at` (unix; default now) is when the order lost the server."""
        outbid_at = self.clock.time() if outbid_at is None else outbid_at
        ask = rental.max_usd_per_hour
        bid = spot_bid_per_day(rental.offer, ask, self.rival_bids(rental.offer.server_id))
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
