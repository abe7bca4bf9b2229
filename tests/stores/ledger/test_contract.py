"""The ledger contract, run against the SQLite file and the PostgreSQL database alike."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from runner import liveness
from runner.stores.ledger import LedgerError, Rental, RentalLedger, open_ledger
from runner.stores.ledger.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from runner.stores.pg import Conn, PgDatabase
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
        ledger.set_order(rid, "1939941")
        assert ledger.rentals("run-1")[0].state == "ordered"
        for state in ("running", "releasing"):
            ledger.set_state(rid, state)
            assert ledger.unreleased("run-1")[0].state == state
        ledger.set_state(rid, "released", note="cancelled, gone from my_orders")
    with _open(store_target) as again:
        [done] = again.rentals("run-1")
        assert (done.order_id, done.state, done.note) == (
            "1939941",
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
    any_ledger.set_order(b, "10")
    any_ledger.set_state(b, "released")
    d = any_ledger.record_intent("r2", "d", 4, None, None, None)
    assert [r.id for r in any_ledger.unreleased()] == [c, d]
    assert any_ledger.unreleased("r1") == []
    assert [r.id for r in any_ledger.unreleased("r2")] == [c, d]
    assert [r.job_id for r in any_ledger.rentals("r1")] == ["a", "b"]
    assert any_ledger.rentals("nope") == []


def test_failed_is_refused_once_an_order_exists(any_ledger: RentalLedger) -> None:
    rid = any_ledger.record_intent("r", "j", 1, None, None, None)
    any_ledger.set_order(rid, "5")
    with pytest.raises(ValueError, match="cannot be marked failed"):
        any_ledger.set_state(rid, "failed")
    assert any_ledger.unreleased()[0].state == "ordered"


def test_an_order_id_reopens_a_failed_intent_and_keeps_a_later_state(
    any_ledger: RentalLedger,
) -> None:
    rid = any_ledger.record_intent("r", "j", 1, None, None, None)
    any_ledger.set_state(rid, "failed", "cleanup gave up early")
    any_ledger.set_order(rid, "7")
    assert any_ledger.unreleased()[0].state == "ordered"
    any_ledger.set_state(rid, "releasing")
    any_ledger.set_order(rid, "7")
    assert any_ledger.unreleased()[0].state == "releasing"


def test_unknown_rental_and_state_are_errors(any_ledger: RentalLedger) -> None:
    with pytest.raises(KeyError):
        any_ledger.set_order(999, "1")
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
                any_ledger.set_order(rid, str(n * 1000 + i))
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
    assert all(
        r.order_id == str(r.server_id * 1000 + int(r.job_id.rsplit("-", 1)[1])) for r in every
    )
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


def _a_ledger_with_numeric_order_ids(target: str) -> None:
    """A ledger as the clore-run before text order ids left it (SQLite schema 3, PostgreSQL
    ledger schema 2): an order id a whole number in an integer column."""
    rows = (
        ("old", "a", 88028, 1939941, "running", 1.0, 2.0, 50001),
        ("old", "b", 99173, None, "intent", 3.0, 4.0, None),
    )
    insert = (
        "INSERT INTO rentals (key, run_id, job_id, server_id, order_id, state, created_at, "
        "updated_at, tag) VALUES ({})"
    )
    if target.startswith("postgresql:"):
        from runner.stores.ledger.postgres import MIGRATIONS as PG_MIGRATIONS

        db = PgDatabase(target, what="ledger", error=LedgerError)
        db.migrate("ledger", PG_MIGRATIONS[:2])
        statement = insert.format(", ".join(["%s"] * 9)).encode()

        def fill(conn: Conn) -> None:
            for n, row in enumerate(rows):
                conn.execute(statement, (f"k{n}", *row))

        db.run("fill", fill)
        db.close()
        return
    with closing(sqlite3.connect(target)) as db, db:
        for step in SQLITE_MIGRATIONS[:3]:
            for statement in step:
                db.execute(statement)
        plain = insert.replace("key, ", "").format(", ".join(["?"] * 8))
        db.executemany(plain, rows)
        db.execute("PRAGMA user_version = 3")


def test_numeric_order_ids_of_an_older_ledger_are_read_as_text_and_any_text_is_kept(
    store_target: str,
) -> None:
    _a_ledger_with_numeric_order_ids(store_target)
    with _open(store_target) as ledger:
        a, b = ledger.rentals("old")
        assert (a.order_id, a.state, a.tag, b.order_id) == ("1939941", "running", 50001, None)
        # The column holds text now: a number-like id keeps its spelling, and an id need not
        # be a number at all (another marketplace's).
        ledger.set_order(b.id, "0012")
        c = ledger.record_intent("new", "c", 1, None, None, None)
        ledger.set_order(c, "ord-7f3a")
        assert c > b.id
    with _open(store_target) as again:
        assert [r.order_id for r in again.rentals("old")] == ["1939941", "0012"]
        assert [r.order_id for r in again.rentals("new")] == ["ord-7f3a"]


def test_every_verdict_and_its_reason_is_kept_in_order(any_ledger: RentalLedger) -> None:
    """A row's note holds its last word only; the verdicts on whose order it is stay, each."""
    a = any_ledger.record_intent("r", "a", 1, 2.0, "USD", 0.1)
    b = any_ledger.record_intent("r", "b", 2, 2.0, "USD", 0.1)
    any_ledger.record_verdict(a, "unproven", "its tag is absent", order_id="77")
    any_ledger.record_verdict(b, "not-ours", "another tag")
    any_ledger.record_verdict(a, "ours", "its tag, 54321/http, is ours", order_id="77")
    kept = any_ledger.verdicts(a)
    assert [(v.verdict, v.reason, v.order_id) for v in kept] == [
        ("unproven", "its tag is absent", "77"),
        ("ours", "its tag, 54321/http, is ours", "77"),
    ]
    assert kept[0].at < kept[1].at
    assert [(v.verdict, v.order_id) for v in any_ledger.verdicts(b)] == [("not-ours", None)]
    assert any_ledger.verdicts(999) == []
