"""The Clore marketplace as the core's `Market`: offers become quotes the core can rent.

Pure, over a snapshot of offers the caller fetched. A quote's price is what an hour costs the
renter, the renter's fee included (a spot order: our bid, plus its fee); a host is named by its
server id. Fitting is `market.misses` plus the terms a server was rented on: a spot server can
be outbid, so it is no server for an on-demand ask, and a bid can sit above a job's cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import replace

from runner.backends.clore import bill
from runner.backends.clore.market import (
    Offer,
    explain_no_fit,
    matching_offers,
    misses,
    per_hour,
    spot_bid_per_day,
)
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk
from runner.core.rentals import Quote

_ANY_GPU = GpuAsk()


class OfferMarket:
    """Today's offers, priced with the renter's fee, for the core to choose from."""

    def __init__(
        self,
        offers: Iterable[Offer],
        currency: str,
        creation_fee_usd: float = bill.FALLBACK_CREATION_FEE_USD,
    ) -> None:
        self._offers = list(offers)
        self._by_host = {str(o.server_id): o for o in self._offers}
        # Every offer seen, kept for fitting and renting after a newer snapshot (`update`)
        # left it out: a server we rented is listed as rented, or not at all.
        self._seen: dict[str, Offer] = dict(self._by_host)
        self.currency = currency
        self.creation_fee_usd = creation_fee_usd
        self._memory: HostMemory | None = None
        self._bound_s = bill.DEFAULT_BOOT_BOUND_S
        self._images: tuple[str, ...] = ()

    def remember(self, memory: HostMemory, bound_s: float, images: Iterable[str] = ()) -> None:
        """Rank and quote with the host history: hosts it says to skip are left out, the
        rest rank by expected cost (boots given up after `bound_s`, the expected pull of the
        run's `images` counted as time), and each quote carries its host's expected boot and
        chance of a failed one, for hedging."""
        self._memory, self._bound_s, self._images = memory, bound_s, tuple(images)

    def update(self, offers: Iterable[Offer]) -> None:
        """A newer snapshot to choose from; the offers seen before stay known for fitting."""
        self._offers = list(offers)
        self._by_host = {str(o.server_id): o for o in self._offers}
        self._seen.update(self._by_host)

    def offer(self, quote: Quote) -> Offer:
        """The offer a quote came from (to rent it)."""
        return self._seen[quote.host]

    def best(self, ask: GpuAsk | None, excluded: Set[str]) -> Quote | None:
        ask = ask or _ANY_GPU
        skip = {int(h) for h in excluded if h.isdigit()}
        ranked = matching_offers(self._offers, ask, skip, self._memory, self._bound_s, self._images)
        for offer in ranked:
            quote = self.quote(offer, ask)
            if quote is not None:  # else no spot bid wins within the cap: the next one
                return quote
        return None

    def fits(self, quote: Quote, ask: GpuAsk | None) -> bool:
        ask = ask or _ANY_GPU
        offer = self._seen.get(quote.host)
        if offer is None or (quote.spot and not ask.spot):
            return False
        # Ours now, so the market shows it rented: that does not make it unfit for our jobs.
        if misses(replace(offer, rented=False), ask):
            return False
        return ask.max_usd_per_hour is None or quote.usd_per_hour <= ask.max_usd_per_hour

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        skip = {int(h) for h in excluded if h.isdigit()}
        return explain_no_fit(self._offers, ask or _ANY_GPU, self.currency, skip)

    def quote(self, offer: Offer, ask: GpuAsk) -> Quote | None:
        """What renting `offer` for `ask` costs an hour, fee included; None when no spot bid
        can win within the ask's cap."""
        usd_per_hour = self.usd_per_hour(offer, ask)
        if usd_per_hour is None:
            return None
        host = str(offer.server_id)
        memory = self._memory
        return Quote(
            host=host,
            gpu_model=offer.gpu_model,
            gpu_count=offer.gpu_count,
            usd_per_hour=usd_per_hour,
            creation_fee_usd=self.creation_fee_usd,
            creation_fee_after_s=bill.CREATION_FEE_GRACE_S,
            spot=ask.spot,
            boot_s=memory.expected_boot_s(host) if memory and memory.hosts else None,
            fail_chance=memory.fail_chance(host) if memory else None,
            max_rental_s=offer.max_rental_s,
        )

    def usd_per_hour(self, offer: Offer, ask: GpuAsk) -> float | None:
        """On demand: the offer's price (fee included); spot: our bid, with its fee."""
        if not ask.spot:
            return offer.on_demand_usd_per_hour
        bid_per_day = spot_bid_per_day(offer, ask.max_usd_per_hour, self.rival_bids(offer))
        if bid_per_day is None or offer.usd_per_unit is None:
            return None
        listed = per_hour(bid_per_day) * offer.usd_per_unit
        return bill.with_fee_per_hour(listed, offer.spot_fee_rate)

    def rival_bids(self, offer: Offer) -> Iterable[float]:
        """Others' active spot bids on `offer`'s server, per day, that ours must beat: none
        known to a snapshot of the marketplace alone."""
        return ()
