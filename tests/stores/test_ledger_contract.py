"""The ledger contract, run against the SQLite file and the PostgreSQL database alike."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner.ledger import Rental
from runner.stores.ledger import RentalLedger, open_ledger
from tests.stores.conftest import Tick


def _open(target: str) -> RentalLedger:
    return open_ledger(target if target.startswith("postgresql:") else Path(target), clock=Tick())


def test_round_trip_through_every_state_survives_a_reopen(ledger_target: str) -> None:
    with _open(ledger_target) as ledger:
        rid = ledger.record_intent("run-1", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
        [intent] = ledger.rentals("run-1")
        assert intent == Rental(
            id=rid, run_id="run-1", job_id="train", server_id=88028, order_id=None,
            state="intent", created_at=1_783_700_001.0, updated_at=1_783_700_001.0,
            price_per_day=2.0, currency="USD-Blockchain", usd_per_hour=2 / 24, note="",
        )  # fmt: skip
        ledger.set_order(rid, 1939941)
        assert ledger.rentals("run-1")[0].state == "ordered"
        for state in ("running", "releasing"):
            ledger.set_state(rid, state)
            assert ledger.unreleased("run-1")[0].state == state
        ledger.set_state(rid, "released", note="cancelled, gone from my_orders")
    with _open(ledger_target) as again:
        [done] = again.rentals("run-1")
        assert (done.order_id, done.state, done.note) == (
            1939941,
            "released",
            "cancelled, gone from my_orders",
        )
        assert done.updated_at == 1_783_700_005.0
        assert again.unreleased() == []


def test_unreleased_filters_by_run_and_leaves_out_released_and_failed(
    any_ledger: RentalLedger,
) -> None:
    a = any_ledger.record_intent("r1", "a", 1, None, None, None)
    b = any_ledger.record_intent("r1", "b", 2, None, None, None)
    c = any_ledger.record_intent("r2", "c", 3, None, None, None)
    any_ledger.set_state(a, "failed", "nothing created")
    any_ledger.set_order(b, 10)
    any_ledger.set_state(b, "released")
    assert [r.id for r in any_ledger.unreleased()] == [c]
    assert any_ledger.unreleased("r1") == []
    assert [r.job_id for r in any_ledger.rentals("r1")] == ["a", "b"]


def test_failed_is_refused_once_an_order_exists(any_ledger: RentalLedger) -> None:
    rid = any_ledger.record_intent("r", "j", 1, None, None, None)
    any_ledger.set_order(rid, 5)
    with pytest.raises(ValueError, match="cannot be marked failed"):
        any_ledger.set_state(rid, "failed")
    assert any_ledger.unreleased()[0].state == "ordered"


def test_an_order_id_reopens_a_failed_intent_and_keeps_a_later_state(
    any_ledger: RentalLedger,
) -> None:
    rid = any_ledger.record_intent("r", "j", 1, None, None, None)
    any_ledger.set_state(rid, "failed", "cleanup gave up early")
    any_ledger.set_order(rid, 7)
    assert any_ledger.unreleased()[0].state == "ordered"
    any_ledger.set_state(rid, "releasing")
    any_ledger.set_order(rid, 7)
    assert any_ledger.unreleased()[0].state == "releasing"


def test_unknown_rental_and_state_are_errors(any_ledger: RentalLedger) -> None:
    with pytest.raises(KeyError):
        any_ledger.set_order(999, 1)
    with pytest.raises(KeyError):
        any_ledger.set_state(999, "released")
    with pytest.raises(ValueError, match="unknown rental state"):
        any_ledger.set_state(1, "bogus")  # type: ignore[arg-type]


def test_many_threads_write_through_one_ledger(any_ledger: RentalLedger) -> None:
    def worker(n: int) -> None:
        for i in range(10):
            rid = any_ledger.record_intent(f"run-{n}", f"j{i}", i, 1.0, "USD", 0.1)
            any_ledger.set_order(rid, n * 100 + i)
            any_ledger.set_state(rid, "released")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [r for n in range(6) for r in any_ledger.rentals(f"run-{n}")]
    assert len(rows) == 60 and {r.state for r in rows} == {"released"}
    assert len({r.order_id for r in rows}) == 60
