"""The money arithmetic: fees on top of the listed price, the 10-minute creation-fee rule."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.backends.clore import bill
from runner.core import money
from runner.core.rentals import Quote


def test_per_day_and_per_hour_are_inverse() -> None:
    assert money.per_hour_from_per_day(2.4) == pytest.approx(0.1)
    assert money.per_day_from_per_hour(0.1) == pytest.approx(2.4)


def test_documented_rates_when_the_account_gives_none_or_nonsense() -> None:
    fallback = bill.renter_fee_rates(None, None)
    assert (fallback.on_demand_fee_rate, fallback.spot_fee_rate) == (0.05, 0.0125)
    assert fallback.source == "documented" and fallback.note
    assert bill.renter_fee_rates(0.05, None).source == "documented"
    assert bill.renter_fee_rates(5.0, 1.25).source == "documented"  # percent, not fraction
    assert bill.renter_fee_rates(-0.01, 0.01).source == "documented"
    rates = bill.renter_fee_rates(0.025, 0.00625)
    assert (rates.fee_rate(False), rates.fee_rate(True), rates.source) == (
        0.025,
        0.00625,
        "account",
    )
    assert bill.DOCUMENTED_RATES.fee_rate(False) == 0.05
    assert bill.DOCUMENTED_RATES.fee_rate(True) == 0.0125


def test_the_referral_example_100_clore_per_day_costs_105() -> None:
    # Clore's worked example: 100 CLORE/day on-demand, renter base fee 5 CLORE.
    per_day = bill.with_fee_per_hour(100.0, 0.05)
    assert per_day == pytest.approx(105.0)
    assert bill.listed_per_hour_under_cap(per_day, 0.05) == pytest.approx(100.0)


def test_worst_case_includes_the_creation_fee_only_from_ten_minutes() -> None:
    assert money.worst_case_usd(1.05, 599, 0.1, bill.CREATION_FEE_GRACE_S) == pytest.approx(
        1.05 * 599 / 3600
    )
    assert money.worst_case_usd(1.05, 600, 0.1, bill.CREATION_FEE_GRACE_S) == pytest.approx(
        1.05 / 6 + 0.1
    )
    assert money.worst_case_usd(1.05, -5, 0.1, bill.CREATION_FEE_GRACE_S) == 0.0


def test_billed_cost_parts() -> None:
    short = bill.billed_cost(0.5, 2.0, 0.05, 0.1, lived_s=599.9)
    assert (short.rental_usd, short.renter_fee_usd, short.creation_fee_usd) == (
        1.0,
        pytest.approx(0.05),
        0.0,
    )
    long = bill.billed_cost(0.5, 2.0, 0.05, 0.1, lived_s=600)
    assert long.creation_fee_usd == pytest.approx(0.2)
    assert long.total_usd == pytest.approx(1.25)


def test_estimated_cost_splits_the_fee_back_out() -> None:
    cost = bill.estimated_cost(1.05, 3600, 0.05, 0.1)
    assert cost.rental_usd == pytest.approx(1.0)
    assert cost.renter_fee_usd == pytest.approx(0.05)
    assert cost.creation_fee_usd == 0.1
    assert bill.estimated_cost(1.05, 60, 0.05, 0.1).creation_fee_usd == 0.0


@given(
    price=st.floats(0, 1e6, allow_nan=False),
    rate=st.floats(0, 0.5, allow_nan=False),
    held_s=st.floats(0, 1e7, allow_nan=False),
)
@pytest.mark.slow
def test_estimate_and_billing_agree_for_the_same_order(
    price: float, rate: float, held_s: float
) -> None:
    """An order billed from its spend and estimated from its hourly price cost the same."""
    spend_native = price * held_s / money.SECONDS_PER_DAY
    billed = bill.billed_cost(spend_native, 1.0, rate, 0.1, held_s)
    hourly = bill.with_fee_per_hour(money.per_hour_from_per_day(price), rate)
    estimated = bill.estimated_cost(hourly, held_s, rate, 0.1)
    assert math.isclose(billed.total_usd, estimated.total_usd, rel_tol=1e-9, abs_tol=1e-9)
    assert (
        billed.total_usd
        <= money.worst_case_usd(hourly, held_s, 0.1, bill.CREATION_FEE_GRACE_S) * (1 + 1e-9) + 1e-12
    )


@pytest.mark.parametrize(
    ("amount_usd", "text"),
    [
        (0, "$0.00"),
        (0.25, "$0.25"),
        (0.01, "$0.01"),
        (0.0062, "$0.0062"),
        (0.15, "$0.15"),
        (1 / 3, "$0.3333"),
        (12.5, "$12.50"),
        (1234.567, "$1234.57"),
        (-0.004, "-$0.004"),
        (0.00001, "$0.00"),
    ],
)
def test_amounts_in_sentences_keep_what_tells_them_apart(amount_usd: float, text: str) -> None:
    assert money.usd_text(amount_usd) == text


def test_the_creation_fee_s_grace_is_the_quote_s() -> None:
    """The core holds no marketplace's grace: each quote says when its fee is charged."""
    from_the_start = Quote("h", "RTX 3090", 1, 3.6, creation_fee_usd=0.5)
    after_ten_minutes = dataclasses.replace(from_the_start, creation_fee_after_s=600.0)
    assert from_the_start.cost_usd(60) == pytest.approx(0.06 + 0.5)
    assert after_ten_minutes.cost_usd(60) == pytest.approx(0.06)
    assert after_ten_minutes.cost_usd(600) == pytest.approx(0.6 + 0.5)
