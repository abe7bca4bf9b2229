"""Offer pricing, matching, ranking and spot bids on the reference's sample servers (pure)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.backends.clore import bill
from runner.backends.clore.market import (
    Offer,
    best_offer,
    closest_offers,
    explain_no_fit,
    matching_offers,
    max_rental_s,
    misses,
    offer_from_server,
    offers_from_servers,
    parse_gpu,
    per_day,
    per_hour,
    rank_key,
    spot_bid_per_day,
)
from runner.backends.clore.models import MarketServer
from runner.backends.clore.quotes import OfferMarket
from runner.core.model import GpuAsk
from tests.fakes.clore_api import SAMPLE_SERVERS

SERVERS = [MarketServer.model_validate(s) for s in SAMPLE_SERVERS]
# Most tests here check the listed-price arithmetic; the fee tests at the end add the fees.
NO_FEES = bill.RenterFeeRates(0.0, 0.0, "none")


def offers(currency: str = "CLORE-Blockchain", fees: bill.RenterFeeRates = NO_FEES) -> list[Offer]:
    return offers_from_servers(SERVERS, currency, fees=fees)


def offer(server_id: int, currency: str = "CLORE-Blockchain") -> Offer:
    return next(o for o in offers(currency) if o.server_id == server_id)


def ids(found: list[Offer]) -> list[int]:
    return [o.server_id for o in found]


def test_per_day_to_per_hour_divides_by_24() -> None:
    assert per_hour(24.0) == 1.0
    assert per_hour(3.0) == pytest.approx(0.125)
    assert per_day(per_hour(1108.85)) == pytest.approx(1108.85)


@pytest.mark.parametrize("currency", ["bitcoin", "CLORE-Blockchain", "USD-Blockchain"])
def test_reference_server_costs_an_eighth_of_a_dollar_an_hour_in_every_currency(
    currency: str,
) -> None:
    # 1108.85 CLORE = 0.0000441 BTC = 3 USD-Blockchain = 3 USD per DAY → 0.125 USD per hour.
    sample = offer(99173, currency)
    assert sample.on_demand_usd_per_hour == pytest.approx(0.125)
    assert sample.spot_usd_per_hour == pytest.approx(0.125)
    assert sample.gpu_model == "NVIDIA GeForce RTX 4090" and sample.gpu_count == 1
    assert (sample.vram_gb, sample.reliability, sample.location) == (23, 0.9964, "NO")
    assert sample.cuda_version == "13.0"


def test_clore_price_is_converted_with_the_servers_own_ratio() -> None:
    sample = offer(99173)
    assert sample.on_demand_price_per_day == 1108.85  # native, untouched
    assert sample.usd_per_unit == pytest.approx(3.0 / 1108.85)


def test_a_host_whose_quotes_disagree_is_priced_in_the_currency_paid() -> None:
    # Incident host: USD-Blockchain 1.61/day, but its CLORE price is worth 4.0 USD/day.
    assert offer(100504, "USD-Blockchain").on_demand_usd_per_hour == pytest.approx(1.61 / 24)
    assert offer(100504, "CLORE-Blockchain").on_demand_usd_per_hour == pytest.approx(4.0 / 24)


def test_sparse_server_parses_and_has_no_price_without_a_usd_quote() -> None:
    mixed = offer(100605)
    assert (mixed.gpu_model, mixed.gpu_count, mixed.vram_gb) == ("Mixed GPUs", 6, 11)
    assert mixed.allowed_currencies == ("CLORE-Blockchain",)  # inferred from its quotes
    assert mixed.on_demand_usd_per_hour is None
    assert mixed.location is None and mixed.cuda_version is None
    fallback = offer_from_server(
        SERVERS[6], "CLORE-Blockchain", {"CLORE-Blockchain": 0.0027}, NO_FEES
    )
    assert fallback.on_demand_usd_per_hour == pytest.approx(3000 * 0.0027 / 24)


@pytest.mark.parametrize(
    ("spec", "array", "expected"),
    [
        ("2x NVIDIA GeForce RTX 3090", [], ("NVIDIA GeForce RTX 3090", 2)),
        ("6x Mixed GPUs", [], ("Mixed GPUs", 6)),
        (None, [" RTX 3090", "RTX 3090 "], ("RTX 3090", 2)),
        ("NVIDIA RTX A6000", [], ("NVIDIA RTX A6000", 1)),
        (None, [], ("unknown GPU", 0)),
    ],
)
def test_parse_gpu(spec: str | None, array: list[str], expected: tuple[str, int]) -> None:
    assert parse_gpu(spec, array) == expected


def test_type_matches_case_insensitively_as_a_substring() -> None:
    assert ids(matching_offers(offers(), GpuAsk(type="rtx 4090"))) == [99173]  # 100403 rented
    assert ids(matching_offers(offers(), GpuAsk(type="4090"))) == [99173]
    assert set(ids(matching_offers(offers(), GpuAsk(type="RTX")))) == {
        99173,
        88028,
        100201,
        100504,
        100706,
    }


def test_count_vram_price_reliability_currency_and_exclusions_filter() -> None:
    assert ids(matching_offers(offers(), GpuAsk(type="3090", count=2))) == [100201]
    assert ids(matching_offers(offers(), GpuAsk(min_vram_gb=40))) == [100302]
    cheap = GpuAsk(max_usd_per_hour=0.1)
    assert ids(matching_offers(offers(), cheap)) == [88028, 100706]
    assert ids(matching_offers(offers(), cheap, excluded={88028})) == [100706]
    reliable = GpuAsk(type="3090", min_reliability=0.99)
    assert ids(matching_offers(offers(), reliable)) == [88028]
    assert 100201 not in ids(matching_offers(offers("USD-Blockchain"), GpuAsk(type="3090")))


def test_spot_asks_filter_and_rank_by_the_spot_minimum() -> None:
    # 99173 spot 3/day = 0.125 $/h; 88028 spot 1.5/day = 0.0625 $/h.
    ask = GpuAsk(max_usd_per_hour=0.07, spot=True, min_reliability=0.9)
    assert ids(matching_offers(offers(), ask)) == [88028]
    assert ids(matching_offers(offers(), dataclasses.replace(ask, spot=False))) == []


def test_ranking_weighs_reliability_by_cost_per_reliable_hour() -> None:
    # 100706 is the cheapest per hour (0.054 $/h) but at reliability 0.6 a reliable hour costs
    # 0.090; 88028 costs 0.083 $/h at reliability 1, so it ranks first.
    ranked = matching_offers(offers(), GpuAsk(max_usd_per_hour=0.1))
    assert ids(ranked) == [88028, 100706]
    assert ranked[1].on_demand_usd_per_hour < ranked[0].on_demand_usd_per_hour  # type: ignore[operator]


def _priced(server_id: int, usd_per_hour: float | None, reliability: float | None) -> Offer:
    return dataclasses.replace(
        offer(99173), server_id=server_id, on_demand_usd_per_hour=usd_per_hour,
        reliability=reliability,
    )  # fmt: skip


def test_rank_rule_reliability_is_worth_its_share_of_the_price() -> None:
    a = _priced(1, 0.300, 0.99)  # 0.303 per reliable hour
    b = _priced(2, 0.295, 0.95)  # 0.311: cheaper per hour, yet worse
    c = _priced(3, 0.250, 0.95)  # 0.263: cheap enough to beat `a` despite reliability
    assert ids(sorted([b, a], key=rank_key)) == [1, 2]
    assert ids(sorted([a, c], key=rank_key)) == [3, 1]


def test_rank_ties_break_on_price_then_reliability_then_id() -> None:
    same_cost_cheaper = _priced(5, 0.2, 0.8)  # 0.25 per reliable hour
    same_cost_dearer = _priced(4, 0.25, 1.0)  # 0.25 as well
    assert ids(sorted([same_cost_dearer, same_cost_cheaper], key=rank_key)) == [5, 4]
    twins = [_priced(9, 0.2, 0.9), _priced(8, 0.2, 0.9)]
    assert ids(sorted(twins, key=rank_key)) == [8, 9]


def test_unknown_price_and_reliability_rank_last() -> None:
    unknown_price = _priced(1, None, 1.0)
    unknown_reliability = _priced(2, 0.1, None)
    known = _priced(3, 1.0, 0.5)
    assert ids(sorted([unknown_price, unknown_reliability, known], key=rank_key)) == [3, 2, 1]


def test_misses_lists_every_reason() -> None:
    ask = GpuAsk(type="A100", count=2, min_vram_gb=40, max_usd_per_hour=0.1, min_reliability=0.999)
    reasons = misses(offer(100201, "USD-Blockchain"), ask, excluded={100201})
    assert reasons == (
        "host excluded for this run",
        "does not take USD-Blockchain (takes bitcoin, CLORE-Blockchain)",
        "GPU 'NVIDIA GeForce RTX 3090' does not match 'A100'",
        "24 GB VRAM per GPU, 40 GB needed",
        "on-demand 0.200 $/h over the 0.100 $/h cap",
        "reliability 95.0% under 99.9%",
    )
    assert misses(offer(100403), GpuAsk()) == ("already rented",)
    assert misses(offer(100605), GpuAsk()) == ("no on-demand price in CLORE-Blockchain",)


def test_closest_offers_explain_a_non_fitting_ask() -> None:
    ask = GpuAsk(type="4090", max_usd_per_hour=0.1)
    assert best_offer(offers(), ask) is None
    near = closest_offers(offers(), ask, limit=2)
    assert [(n.offer.server_id, n.reasons) for n in near] == [
        (100403, ("already rented",)),
        (99173, ("on-demand 0.125 $/h over the 0.100 $/h cap",)),
    ]
    text = explain_no_fit(offers(), GpuAsk(type="RTX 5090"), "CLORE-Blockchain")
    assert text.startswith("no offer fits 1x RTX 5090, on-demand, paid in CLORE-Blockchain")
    assert "#88028 1x NVIDIA GeForce RTX 3090, 0.083 $/h: GPU" in text
    assert "no offer fits" in explain_no_fit([], GpuAsk(), "bitcoin")


def test_spot_bid_is_above_the_minimum_and_never_above_the_cap() -> None:
    sample = offer(99173)  # spot minimum 1108.85 CLORE/day = 0.125 $/h
    assert spot_bid_per_day(sample, 0.2) == pytest.approx(1108.85 * 1.05)
    capped = spot_bid_per_day(sample, 0.126)
    assert capped == pytest.approx(per_day(0.126) * 1108.85 / 3.0)
    assert capped is not None and per_hour(capped * sample.usd_per_unit) <= 0.126  # type: ignore[operator]
    assert spot_bid_per_day(sample, 0.12) is None  # the minimum alone is over the cap
    assert spot_bid_per_day(sample, None) == pytest.approx(1108.85 * 1.05)


def test_spot_bid_outbids_rivals_within_the_cap() -> None:
    sample = offer(99173)
    assert spot_bid_per_day(sample, 0.2, [1200.0]) == pytest.approx(1260.0)
    cap_per_day = per_day(0.2) * 1108.85 / 3.0  # ≈ 1774 CLORE/day
    assert spot_bid_per_day(sample, 0.2, [1700.0]) == pytest.approx(cap_per_day)
    assert spot_bid_per_day(sample, 0.2, [cap_per_day]) is None  # a tie does not win
    assert spot_bid_per_day(offer(100605), 1.0) is None  # no spot price at all


@given(
    floor=st.floats(1e-6, 1e5),
    rate=st.floats(1e-6, 1e5),
    cap=st.floats(1e-4, 1e3),
    rivals=st.lists(st.floats(0, 2e5), max_size=3),
)
@pytest.mark.slow
def test_spot_bid_property(floor: float, rate: float, cap: float, rivals: list[float]) -> None:
    sample = dataclasses.replace(offer(99173), spot_min_price_per_day=floor, usd_per_unit=rate)
    bid = spot_bid_per_day(sample, cap, rivals)
    if bid is not None:
        assert bid >= floor
        assert all(bid > r for r in rivals if r > 0)
        assert per_hour(bid * rate) <= cap * (1 + 1e-9)


def test_expected_cost_ranks_a_host_that_fails_its_boots_behind_a_dearer_sound_one() -> None:
    from runner.backends.clore.market import expected_rank_key, matching_offers
    from runner.core.hosts import HostEvent, HostMemory

    base = offer(99173)
    cheap = dataclasses.replace(base, server_id=1, on_demand_usd_per_hour=0.50, reliability=1.0)
    sound = dataclasses.replace(base, server_id=2, on_demand_usd_per_hour=0.55, reliability=1.0)
    failing = [HostEvent("1", k, t) for t, k in enumerate(["never_up", "never_up", "up"])]
    booted = [HostEvent("2", "up", t, 60.0) for t in range(3)]
    memory = HostMemory.of(failing + booted, now=1e9)
    ask = GpuAsk()
    assert [o.server_id for o in matching_offers([cheap, sound], ask)] == [1, 2]
    # Given up after 15 minutes (a user's bound past the grace): the fee and the wait count.
    ranked = matching_offers([cheap, sound], ask, memory=memory, given_up_after_s=900)
    assert [o.server_id for o in ranked] == [2, 1]
    assert expected_rank_key(cheap, False, HostMemory(), 900)[1] == 0.50


def test_the_marketplaces_mrl_is_a_maximum_in_hours_and_a_quote_carries_it_in_seconds() -> None:
    assert offer(99173).max_rental_s == 720 * 3600.0  # the reference's sample lists 720
    assert max_rental_s(73) == 73 * 3600.0
    # Seconds where hours would be more than a year (the spot market's 2520000): the shorter
    # reading, which passes a host over at worst.
    assert max_rental_s(2_520_000) == 2_520_000.0
    assert max_rental_s(None) is None and max_rental_s(0) is None
    quote = OfferMarket([offer(99173)], "CLORE-Blockchain").quote(offer(99173), GpuAsk())
    assert quote is not None and quote.max_rental_s == 720 * 3600.0
