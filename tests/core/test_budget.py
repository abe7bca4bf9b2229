"""The budget on its own: a worst case must fit before a rental, a longer hold extends its
reservation first, a give-back counts the cost so far until the adapter's figure replaces it,
and a daily budget forgets earlier days."""

from __future__ import annotations

import pytest

from runner.core.budget import DAY_S, Budget
from runner.core.rentals import Quote

Q = Quote("h1", "RTX 3090", 1, 3.60)  # $3.60/h: a dollar is 1,000 s
FEE = Quote("h2", "RTX 3090", 1, 3.60, creation_fee_usd=0.5, creation_fee_after_s=600.0)


def test_no_limit_fits_anything() -> None:
    assert Budget().over(1e9, 0.0) <= 0


def test_a_rentals_reservation_counts_until_its_cost_passes_it() -> None:
    b = Budget(10.0)
    b.reserve(1, Q, 0.0, 2000.0)  # $2 reserved
    assert b.committed_usd(0.0) == pytest.approx(2.0)
    assert b.committed_usd(3000.0) == pytest.approx(3.0)  # held past it: its cost counts
    assert b.over(8.0, 0.0) <= 0 < b.over(8.01, 0.0)


def test_extending_a_hold_needs_the_money_first() -> None:
    b = Budget(3.0)
    b.reserve(1, Q, 0.0, 2000.0)
    assert b.extend(1, 3000.0, 100.0)  # $3: all of it
    assert not b.extend(1, 3100.0, 100.0)
    assert b.committed_usd(100.0) == pytest.approx(3.0)


def test_a_give_back_counts_the_cost_so_far_until_the_adapters_figure() -> None:
    b = Budget(10.0)
    b.reserve(1, Q, 0.0, 5000.0)
    assert b.given_back(1, 500.0) == pytest.approx(0.5)
    assert b.spent_usd == pytest.approx(0.5) and b.committed_usd(600.0) == pytest.approx(0.5)
    b.settle(1, 0.62)  # what the API billed
    assert b.spent_usd == pytest.approx(0.62)
    b.settle(1, 9.0)  # a second figure for the same order changes nothing
    assert b.spent_usd == pytest.approx(0.62)


def test_no_figure_keeps_the_estimate() -> None:
    b = Budget(10.0)
    b.reserve(1, Q, 0.0, 5000.0)
    b.given_back(1, 500.0)
    b.settle(1, None)
    assert b.spent_usd == pytest.approx(0.5)


def test_a_failed_rent_spends_what_it_cost_and_holds_nothing() -> None:
    b = Budget(10.0)
    b.reserve(1, Q, 0.0, 5000.0)
    b.rent_failed(1, 0.25)
    assert b.committed_usd(0.0) == pytest.approx(0.25)


def test_the_creation_fee_counts_once_the_order_could_live_ten_minutes() -> None:
    b = Budget(10.0)
    b.reserve(1, FEE, 0.0, 500.0)
    assert b.committed_usd(0.0) == pytest.approx(0.5)  # under 10 minutes: no fee
    b.reserve(2, FEE, 0.0, 700.0)
    assert b.committed_usd(0.0) == pytest.approx(0.5 + 0.7 + 0.5)


def test_a_daily_budget_forgets_earlier_days_but_not_servers_held() -> None:
    b = Budget()
    start = DAY_S * 10 + 100.0
    b.per_day(5.0, 4.0, start)
    b.reserve(1, Q, start, start + 1000.0)  # $1 reserved
    assert b.over(0.5, start) > 0  # 4 spent + 1 held + 0.5
    assert not b.new_day_if_due(start + 200.0)
    b.reserve(2, Q, start, start + 10.0)
    b.given_back(2, start + 10.0)
    assert b.new_day_if_due(DAY_S * 11 + 1.0)
    b.settle(2, 5.0)  # a late figure for an earlier day's order does not count either
    # What the held server cost since its create counts whole on the new day.
    assert b.committed_usd(DAY_S * 11 + 1.0) == pytest.approx((DAY_S + 1.0 - 100.0) / 1000)
    assert b.over_a_day(5.5) > 0 >= b.over_a_day(5.0)


def test_a_refusal_says_the_worst_case_and_its_parts() -> None:
    b = Budget(1.0)
    text = b.refusal(FEE, 3600.0, 4.1, 3.1, 0.0)
    assert "budget $1.00 would be exceeded by $3.10" in text
    assert "$3.6000/h x 1.00 h" in text and "creation fee" in text
