"""An order's cost, one share at a time on our own clock (bill.share_since)."""

from __future__ import annotations

import pytest

from runner.backends.clore import bill


def test_a_share_is_the_hourly_price_over_the_time_since_the_last_one() -> None:
    share = bill.share_since(0.36, 1_000.0, 1_300.0, 1_000.0, 0.1, fee_billed=False)
    assert share.usd == pytest.approx(0.03)  # five minutes: inside the fee's grace
    assert (share.billed_until, share.fee_billed) == (1_300.0, False)


def test_the_creation_fee_goes_on_the_first_share_past_the_grace_only() -> None:
    first = bill.share_since(0.36, 0.0, 700.0, 0.0, 0.1, fee_billed=False)
    assert first.usd == pytest.approx(0.36 * 700 / 3600 + 0.1) and first.fee_billed
    again = bill.share_since(0.36, first.billed_until, 1_060.0, 0.0, 0.1, first.fee_billed)
    assert again.usd == pytest.approx(0.036) and again.fee_billed


def test_a_clock_behind_the_last_share_bills_nothing() -> None:
    assert bill.share_since(0.36, 500.0, 400.0, 0.0, 0.1, fee_billed=True).usd == 0.0
