"""Clore offers as the core's market: the quote it rents, what fits a server it holds."""

from __future__ import annotations

import dataclasses

import pytest

from runner.backends.clore import bill
from runner.backends.clore.market import Offer, offers_from_servers
from runner.backends.clore.models import MarketServer
from runner.backends.clore.quotes import OfferMarket
from runner.core.model import GpuAsk
from tests.fakes.clore_api import SAMPLE_SERVERS


def offers() -> list[Offer]:
    servers = [MarketServer.model_validate(s) for s in SAMPLE_SERVERS]
    return offers_from_servers(servers, "CLORE-Blockchain")


def market() -> OfferMarket:
    return OfferMarket(offers(), "CLORE-Blockchain")


def test_the_best_quote_is_the_best_offer_priced_with_the_renters_fee() -> None:
    m = market()
    quote = m.best(GpuAsk(type="3090"), set())
    assert quote is not None and "3090" in quote.gpu_model
    offer = m.offer(quote)
    assert quote.usd_per_hour == offer.on_demand_usd_per_hour  # the fee is already on it
    assert quote.creation_fee_usd == bill.FALLBACK_CREATION_FEE_USD
    # Clore charges it only for an order that lives 10 minutes: the core plans with that
    assert quote.creation_fee_after_s == bill.CREATION_FEE_GRACE_S == 600.0
    other = m.best(GpuAsk(type="3090"), {quote.host})
    assert other is None or other.host != quote.host  # an excluded host is never offered


def test_a_server_held_fits_its_asks_though_the_market_now_shows_it_rented() -> None:
    quote = market().best(GpuAsk(type="3090"), set())
    assert quote is not None
    # The next snapshot of the market, taken after we rented it.
    later = [dataclasses.replace(o, rented=str(o.server_id) == quote.host) for o in offers()]
    m = OfferMarket(later, "CLORE-Blockchain")
    assert m.fits(quote, GpuAsk(type="RTX"))
    assert not m.fits(quote, GpuAsk(type="A100"))
    assert not m.fits(quote, GpuAsk(type="3090", max_usd_per_hour=quote.usd_per_hour / 2))


def test_a_spot_server_is_no_server_for_an_on_demand_ask() -> None:
    m = market()
    quote = m.best(GpuAsk(type="3090", spot=True), set())
    if quote is None:
        pytest.skip("no spot offer of a 3090 in the sample")
    assert quote.spot and m.fits(quote, GpuAsk(type="3090", spot=True))
    assert not m.fits(quote, GpuAsk(type="3090"))
