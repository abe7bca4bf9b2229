"""Orders that end by themselves (a host's maximum rental length reached, a spot order
preempted, a host gone) are settled at what they billed up to `order_end`: in `cleanup`, the
reaper's settlement and a run's give-back; never at $0, never up to when someone looked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.clore.cleanup import reconcile
from runner.backends.clore.ended import billed_usd
from runner.core.money import usd_text
from runner.core.rentals import ServerLost, ServerReady
from runner.spec.loader import parse_pipeline
from runner.stores.ledger.sqlite import SqliteLedger
from tests.backends.clore.test_clore_run import ByHand
from tests.fakes.clore_api import FakeClore
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.fakes.fake_clock import FakeClock

PRICE_PER_DAY = 2.0  # 88028 in USD-Blockchain: one unit is one USD


@pytest.fixture
def ledger(tmp_path: Path, fake_clock: FakeClock) -> Iterator[SqliteLedger]:
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clock) as ledger:
        yield ledger


def _rented(fake: FakeClore, ledger: SqliteLedger) -> tuple[int, int]:
    """A run's rental of 88028 whose order id is known, its run dead since."""
    # USD per hour with the renter's 5 % in it, as a run records it.
    rid = ledger.record_intent(
        "run-1", "train", 88028, PRICE_PER_DAY, "USD-Blockchain", PRICE_PER_DAY / 24 * 1.05
    )
    ledger.mark_create_sent(rid, fake.clock.time(), (0.0, 1.0), tag=54321)
    oid = fake.add_order(88028, age_s=0, tag=54321)
    ledger.mark_create_answered(rid, fake.clock.time())
    ledger.set_order(rid, str(oid))
    ledger.set_state(rid, "running")
    return rid, oid


@pytest.mark.parametrize("completed_spend", [True, False])
def test_cleanup_settles_an_order_that_expired_at_what_it_billed_up_to_its_end(
    fake_clore: FakeClore, ledger: SqliteLedger, completed_spend: bool
) -> None:
    fake_clore.mrl_hours_by_server[88028] = 700 / 3600  # it ends by itself 700 s in
    fake_clore.echo_order_end = True
    fake_clore.completed_spend = completed_spend
    rid, oid = _rented(fake_clore, ledger)
    fake_clore.clock.advance(3600.0)  # cleanup comes an hour later
    (action,) = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert action.kind == "ended" and fake_clore.ended_by_itself == {oid: "expired"}
    # Past the 10 minutes: the creation fee, with no renter's fee on it: what the wallet lost.
    billed = PRICE_PER_DAY * 700 / 86400 * 1.05 + 0.1
    assert fake_clore.billed(oid) == pytest.approx(billed)
    assert f"billed {usd_text(billed)} up to its end after 12 min" in action.describe()
    assert "billed $0.117 " in ledger.rentals("run-1")[0].note
    assert ledger.rentals("run-1")[0].state == "released" and rid == action.rental.id


def test_the_reaper_settles_an_order_that_ended_by_itself_neither_at_0_nor_at_the_worst(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    fake_clore.ends_after_s[88028] = (300.0, "host-gone")
    fake_clore.echo_order_end = True
    fake_clore.completed_spend = False  # what a completed order may lack
    _, oid = _rented(fake_clore, ledger)
    fake_clore.clock.advance(2000.0)
    reconcile(ledger, fake_clore.client(), dry_run=False)
    (rental,) = ledger.rentals("run-1")
    orders = {o.id: o for o in fake_clore.client().my_orders(return_completed=True)}
    settled = billed_usd(rental, orders, worst_usd=5.0)
    assert settled == pytest.approx(PRICE_PER_DAY * 300 / 86400 * 1.05, abs=1e-5)  # no fee
    assert settled == pytest.approx(fake_clore.billed(oid), abs=1e-5)


def test_a_runs_server_whose_order_ended_by_itself_is_settled_up_to_its_end(
    setup: Setup,
) -> None:
    """Its host ends the order 300 s in (gone); the run notices 30 minutes later, the
    completed order lists no spend: the run counts 300 s at the price with fee, no creation
    fee, what the wallet lost, not 30 minutes and the fee."""
    fake = setup.fake
    fake.ends_after_s[88028] = (300.0, "host-gone")
    fake.echo_order_end = True
    fake.completed_spend = False
    pipeline = parse_pipeline(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n", "p.yml", {}
    )
    hand = ByHand(setup, pipeline)
    assert isinstance(hand.rent(), ServerReady)
    (oid,) = fake.orders
    setup.clock.advance(1800.0)
    hand.tell(ServerLost(1, "gone"))
    released = hand.release()
    assert fake.ended_by_itself == {oid: "host-gone"}
    lived_s = fake.lived_s(oid)
    assert lived_s == pytest.approx(300.0, abs=1.0)
    assert released.cost_usd == pytest.approx(fake.billed(oid), rel=0.01)
    assert released.cost_usd == pytest.approx(PRICE_PER_DAY * lived_s / 86400 * 1.05, rel=0.01)
