"""What a reaper settles a dead holder's rental at: what the order was billed, no more."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from runner.backends.clore.api import OrderRequest
from runner.backends.clore.fees import read_fee_schedule
from runner.backends.clore.market import offer_from_server
from runner.backends.clore.models import MarketServer, Order
from runner.backends.clore.reaper import billed_usd
from runner.stores.ledger import Rental
from tests.fakes.clore_api import FakeClore

SERVER = 88028  # the captured order's server: 2 USD/day, CLORE at its own rate
IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"

PRICE_PER_DAY = 2.0  # USD-Blockchain: one unit is one USD
USD_PER_HOUR = PRICE_PER_DAY / 24 * 1.05  # the renter's 5 % on top
CREATION_FEE = 0.1


def rental(order_id: str | None = "7", state: str = "released") -> Rental:
    return Rental(
        1, "run", "job", 99173, order_id, state,  # type: ignore[arg-type]
        0.0, 0.0, PRICE_PER_DAY, "USD-Blockchain", USD_PER_HOUR, "",
    )  # fmt: skip


def order(lived_s: float) -> Order:
    spend = PRICE_PER_DAY * lived_s / 86400
    return Order(id=7, si=99173, price=PRICE_PER_DAY, spend=spend, creation_fee=CREATION_FEE)


def test_an_order_reaped_inside_the_grace_is_settled_without_the_creation_fee() -> None:
    """The issue's case: an order that lived 64 s was settled with the $0.10 creation fee
    ($0.1067 against the $0.0016 the wallet lost)."""
    billed = billed_usd(rental(), {7: order(64)}, worst_usd=5.0)
    assert billed == pytest.approx(PRICE_PER_DAY * 64 / 86400 * 1.05)
    assert billed < 0.002


def test_an_order_that_lived_ten_minutes_is_settled_with_the_fee() -> None:
    billed = billed_usd(rental(), {7: order(601)}, worst_usd=5.0)
    assert billed == pytest.approx(PRICE_PER_DAY * 601 / 86400 * 1.05 + CREATION_FEE)


def test_without_the_apis_figure_the_worst_case_stands_and_nothing_created_costs_nothing() -> None:
    assert billed_usd(rental(), None, worst_usd=5.0) == 5.0
    assert billed_usd(rental(), {}, worst_usd=5.0) == 5.0
    assert billed_usd(rental(order_id=None, state="failed"), None, worst_usd=5.0) == 0.0


def ended(lived_s: float, spend: float | None, spot: bool | None = None) -> Order:
    """An order that ended by itself `lived_s` after its create, as a completed order lists it."""
    return Order(
        id=7, si=99173, price=PRICE_PER_DAY, spend=spend, creation_fee=CREATION_FEE,
        ct=1_700_000_000, order_end=1_700_000_000 + lived_s, expired=True, spot=spot,
    )  # fmt: skip


def test_an_order_that_ended_by_itself_is_settled_at_what_it_billed_up_to_its_end() -> None:
    by_time = PRICE_PER_DAY * 700 / 86400
    # The completed order's spend and its end agree: the fee, since it lived past 10 minutes.
    billed = billed_usd(rental(), {7: ended(700, by_time)}, worst_usd=5.0)
    assert billed == pytest.approx(by_time * 1.05 + CREATION_FEE)
    # A completed order that lists no spend, or a spend of 0: billed by its own stamps, never
    # at $0 and never at the whole reservation.
    for spend in (None, 0.0):
        assert billed_usd(rental(), {7: ended(700, spend)}, worst_usd=5.0) == pytest.approx(billed)
    # Ended 5 minutes in, found much later: no creation fee, whatever the spend suggests.
    early = billed_usd(rental(), {7: ended(300, PRICE_PER_DAY * 900 / 86400)}, worst_usd=5.0)
    assert early == pytest.approx(PRICE_PER_DAY * 900 / 86400 * 1.05)


def test_a_spot_order_that_ended_by_itself_keeps_its_spend_it_billed_nothing_while_outbid() -> None:
    outbid_most = PRICE_PER_DAY * 100 / 86400  # billed 100 s of its 700
    spot = dataclasses.replace(rental(), spot=True, usd_per_hour=PRICE_PER_DAY / 24 * 1.0125)
    billed = billed_usd(spot, {7: ended(700, outbid_most, spot=True)}, worst_usd=5.0)
    assert billed == pytest.approx(outbid_most * 1.0125 + CREATION_FEE)


def test_a_ct_stamped_late_is_not_taken_for_the_start_of_billing() -> None:
    """The reference's one completed order: `order_end - ct` 948 s, its spend 1,006 s. Our
    create went out 58 s before its `ct`: the billing is counted from there."""
    late = dataclasses.replace(rental(), create_sent_at=1_700_000_000 - 58.0)
    billed = billed_usd(late, {7: ended(948, None)}, worst_usd=5.0)
    assert billed == pytest.approx(PRICE_PER_DAY * 1006 / 86400 * 1.05 + CREATION_FEE)
    on_time = dataclasses.replace(rental(), create_sent_at=1_700_000_000 - 2.0)
    billed = billed_usd(on_time, {7: ended(948, None)}, worst_usd=5.0)
    assert billed == pytest.approx(PRICE_PER_DAY * 948 / 86400 * 1.05 + CREATION_FEE)


@pytest.mark.parametrize(("spot", "on_demand_rate"), [(False, 0.05), (False, 0.03), (True, 0.05)])
def test_a_reaped_order_is_settled_at_what_the_fake_billed_it(
    fake_clore: FakeClore, tmp_path: Path, spot: bool, on_demand_rate: float
) -> None:
    """The reaper's settlement against the fake's own bill, past the creation fee's grace: the
    renter's fee on the spend, none on the creation fee (it was once charged on both: the fee
    came out 5 % over the bill), at the account's rates as `renter_fees` gives them."""
    fake_clore.renter_fee_rates["on_demand"]["CLORE-Blockchain"] = on_demand_rate
    client = fake_clore.client()
    fees = read_fee_schedule(client, "CLORE-Blockchain")
    server = MarketServer.model_validate(fake_clore.servers[SERVER])
    offer = offer_from_server(server, "CLORE-Blockchain", fees=fees.rates)
    assert offer.on_demand_price_per_day is not None and offer.usd_per_unit is not None
    price_per_day = offer.on_demand_price_per_day * (0.9 if spot else 1.0)
    bid = price_per_day if spot else None
    made = client.create_order(OrderRequest(SERVER, IMAGE, "CLORE-Blockchain", bid, ssh_key="k"))
    fake_clore.clock.advance(700)
    client.cancel_order(made.id)
    usd_per_hour = offer.usd_per_unit * price_per_day / 24 * (1 + fees.fee_rate(spot))
    row = dataclasses.replace(
        rental(str(made.id)), price_per_day=price_per_day, currency="CLORE-Blockchain",
        usd_per_hour=usd_per_hour, spot=spot,
    )  # fmt: skip
    listed = {o.id: o for o in client.my_orders(return_completed=True)}
    settled = billed_usd(row, listed, worst_usd=50.0, rates=fees.rates)
    wallet_usd = fake_clore.billed(made.id) * offer.usd_per_unit
    assert fake_clore.lived_s(made.id) >= 600  # the creation fee is in the bill
    assert settled == pytest.approx(wallet_usd, rel=1e-6)
