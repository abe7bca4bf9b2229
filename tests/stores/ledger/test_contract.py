"""The ledger contract, run against the SQLite file and the PostgreSQL database alike."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner import liveness
from runner.stores.ledger import Rental, RentalLedger, open_ledger
from tests.stores.conftest import Tick


def _open(target: str) -> RentalLedger:
    return open_ledger(target if target.startswith("postgresql:") else Path(target), clock=Tick())


def test_round_trip_through_every_state_survives_a_reopen(store_target: str) -> None:
    with _open(store_target) as ledger:
        rid = ledger.record_intent("run-1", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
        [intent] = ledger.rentals("run-1")
        assert intent == Rental(
            id=rid, run_id="run-1", job_id="train", server_id=88028, order_id=None,
            state="intent", created_at=1_783_700_001.0, updated_at=1_783_700_001.0,
            price_per_day=2.0, currency="USD-Blockchain", usd_per_hour=2 / 24, note="",
            owner=intent.owner,
        )  # fmt: skip
        # The process that recorded it: a cleanup on this host can tell whether it still runs.
        assert liveness.Holder.parse(intent.owner) == liveness.current()
        ledger.set_order(rid, 1939941)
        assert ledger.rentals("run-1")[0].state == "ordered"
        for state in ("running", "releasing"):
            ledger.set_state(rid, state)
            assert ledger.unreleased("run-1")[0].state == state
        ledger.set_state(rid, "released", note="cancelled, gone from my_orders")
    with _open(store_target) as again:
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
    d = any_ledger.record_intent("r2", "d", 4, None, None, None)
    assert [r.id for r in any_ledger.unreleased()] == [c, d]
    assert any_ledger.unreleased("r1") == []
    assert [r.id for r in any_ledger.unreleased("r2")] == [c, d]
    assert [r.job_id for r in any_ledger.rentals("r1")] == ["a", "b"]
    assert any_ledger.rentals("nope") == []


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
    with pytest.raises(KeyError):
        any_ledger.set_state(999, "failed")
    with pytest.raises(KeyError):
        any_ledger.mark_create_sent(999, 1.0, None)
    rid = any_ledger.record_intent("r", "j", 1, None, None, None)
    with pytest.raises(ValueError, match="unknown rental state"):
        any_ledger.set_state(rid, "bogus")  # type: ignore[arg-type]


def test_many_threads_write_through_one_ledger(any_ledger: RentalLedger) -> None:
    threads, per_thread = 8, 12
    ids: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(n: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                rid = any_ledger.record_intent(f"run-{n % 2}", f"job-{n}-{i}", n, 1.0, "USD", 0.1)
                any_ledger.set_order(rid, n * 1000 + i)
                any_ledger.set_state(rid, "running")
                any_ledger.unreleased()
                if i % 2:
                    any_ledger.set_state(rid, "released")
                ids.append(rid)
        except BaseException as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    assert len(set(ids)) == threads * per_thread
    every = any_ledger.rentals("run-0") + any_ledger.rentals("run-1")
    assert len(every) == threads * per_thread
    assert all(r.order_id == r.server_id * 1000 + int(r.job_id.rsplit("-", 1)[1]) for r in every)
    assert len(any_ledger.unreleased()) == threads * per_thread // 2
    assert {r.state for r in any_ledger.unreleased()} == {"running"}


def test_ownership_marks_round_trip(any_ledger: RentalLedger) -> None:
    """What the create was asked to be and when it went out: what a cleanup proves an order
    ours by (bools and missing values read back as they were written, in both stores)."""
    a = any_ledger.record_intent("r", "a", 1, 2.0, "USD", 0.1, image="img:1", spot=True)
    b = any_ledger.record_intent("r", "b", 2, 2.0, "USD", 0.1, image="img:2", spot=False)
    c = any_ledger.record_intent("r", "c", 3, None, None, None)
    any_ledger.mark_create_sent(a, 1_783_700_100.5, (-2.0, 3.0))
    any_ledger.mark_create_answered(a, 1_783_700_101.5)
    any_ledger.mark_create_sent(b, 1_783_700_102.0, None)
    ra, rb, rc = any_ledger.rentals("r")
    assert (ra.id, rb.id, rc.id) == (a, b, c)
    assert (ra.image, ra.spot, ra.create_sent_at, ra.create_answered_at) == (
        "img:1", True, 1_783_700_100.5, 1_783_700_101.5,
    )  # fmt: skip
    assert (ra.api_offset_low_s, ra.api_offset_high_s, ra.legacy) == (-2.0, 3.0, False)
    assert (rb.spot, rb.create_answered_at, rb.api_offset_low_s) == (False, None, None)
    assert (rc.spot, rc.image, rc.create_sent_at, rc.legacy) == (None, None, None, False)
    any_ledger.set_state(c, "failed", "nothing created")
    any_ledger.mark_create_sent(c, 1_783_700_103.0, None)  # a create may come after all
    assert any_ledger.unreleased()[-1].state == "intent"
