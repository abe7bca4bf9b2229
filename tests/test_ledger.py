"""The rental ledger: round trips, states, durability settings, threads, bad files."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from runner.errors import InfrastructureError
from runner.ledger import BUSY_TIMEOUT_MS, SCHEMA_VERSION, Ledger, LedgerError, Rental


class Tick:
    """A unix clock that moves one second per reading."""

    def __init__(self, start: float = 1_783_700_000.0) -> None:
        self.t = start

    def time(self) -> float:
        self.t += 1
        return self.t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.db", clock=Tick())


def test_round_trip_through_every_state(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "ledger.db"
    with Ledger(path, clock=Tick()) as ledger:
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
    # A fresh open of the same file sees everything.
    with Ledger(path) as again:
        [done] = again.rentals("run-1")
        assert (done.order_id, done.state, done.note) == (
            1939941,
            "released",
            "cancelled, gone from my_orders",
        )
        assert done.created_at == 1_783_700_001.0 and done.updated_at == 1_783_700_005.0
        assert again.unreleased() == []


def test_unreleased_filters_by_run_and_excludes_released_and_failed(ledger: Ledger) -> None:
    a = ledger.record_intent("r1", "a", 1, None, None, None)
    b = ledger.record_intent("r1", "b", 2, None, None, None)
    c = ledger.record_intent("r2", "c", 3, None, None, None)
    d = ledger.record_intent("r2", "d", 4, None, None, None)
    ledger.set_state(a, "failed", "create refused: server-offline")
    ledger.set_order(c, 7)
    ledger.set_state(c, "released")
    assert [r.id for r in ledger.unreleased()] == [b, d]
    assert [r.id for r in ledger.unreleased("r2")] == [d]
    assert [r.job_id for r in ledger.rentals("r1")] == ["a", "b"]
    assert ledger.rentals("nope") == []


def test_failed_is_refused_once_an_order_exists(ledger: Ledger) -> None:
    rid = ledger.record_intent("r", "j", 1, None, None, None)
    ledger.set_order(rid, 42)
    with pytest.raises(ValueError, match="has an order"):
        ledger.set_state(rid, "failed")
    assert ledger.unreleased()[0].state == "ordered"


def test_an_order_id_reopens_a_failed_intent(ledger: Ledger) -> None:
    # A cleanup beside a live run may give up on an intent whose create was still queued.
    rid = ledger.record_intent("r", "j", 1, None, None, None)
    ledger.set_state(rid, "failed")
    ledger.set_order(rid, 42)
    assert [(r.state, r.order_id) for r in ledger.unreleased()] == [("ordered", 42)]


def test_set_order_keeps_a_later_state(ledger: Ledger) -> None:
    rid = ledger.record_intent("r", "j", 1, None, None, None)
    ledger.set_order(rid, 42)
    ledger.set_state(rid, "running")
    ledger.set_order(rid, 42)
    assert ledger.rentals("r")[0].state == "running"


def test_unknown_rental_and_state_are_errors(ledger: Ledger) -> None:
    with pytest.raises(KeyError):
        ledger.set_order(99, 1)
    with pytest.raises(KeyError):
        ledger.set_state(99, "released")
    with pytest.raises(KeyError):
        ledger.set_state(99, "failed")
    rid = ledger.record_intent("r", "j", 1, None, None, None)
    with pytest.raises(ValueError, match="unknown rental state"):
        ledger.set_state(rid, "gone")  # type: ignore[arg-type]


def test_wal_busy_timeout_and_schema_version_are_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    ledger = Ledger(path)
    assert ledger._db.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    ledger.close()


def test_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Ledger().close()
    assert (tmp_path / ".clore-run" / "ledger.db").is_file()


def test_many_threads_write_through_one_ledger(ledger: Ledger) -> None:
    threads, per_thread = 16, 24
    ids: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(n: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                rid = ledger.record_intent(f"run-{n % 2}", f"job-{n}-{i}", n, 1.0, "bitcoin", 0.1)
                ledger.set_order(rid, n * 1000 + i)
                ledger.set_state(rid, "running")
                ledger.unreleased()
                if i % 2:
                    ledger.set_state(rid, "released")
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
    every = ledger.rentals("run-0") + ledger.rentals("run-1")
    assert len(every) == threads * per_thread
    assert all(r.order_id == r.server_id * 1000 + int(r.job_id.rsplit("-", 1)[1]) for r in every)
    assert len(ledger.unreleased()) == threads * per_thread // 2
    assert {r.state for r in ledger.unreleased()} == {"running"}


def test_two_ledgers_on_one_file_write_at_once(tmp_path: Path) -> None:
    # A run and a `cleanup` are two processes: two connections contending for the write lock.
    path = tmp_path / "ledger.db"
    first, second = Ledger(path), Ledger(path)
    errors: list[BaseException] = []

    def writer(ledger: Ledger, run: str) -> None:
        try:
            for i in range(100):
                ledger.set_state(ledger.record_intent(run, str(i), i, None, None, None), "running")
        except BaseException as exc:
            errors.append(exc)

    pool = [
        threading.Thread(target=writer, args=(first, "a")),
        threading.Thread(target=writer, args=(second, "b")),
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    assert len(first.unreleased()) == 200 and len(second.rentals("a")) == 100
    first.close()
    second.close()


def test_corrupt_file_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"this is not an SQLite database, it is junk\n" * 100)
    with pytest.raises(LedgerError) as caught:
        Ledger(path)
    assert isinstance(caught.value, InfrastructureError) and caught.value.exit_code == 3
    assert str(path) in str(caught.value) and "not a database" in str(caught.value)
    assert "move it aside" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ledger.db").mkdir()  # a folder where the file should be
    with pytest.raises(LedgerError, match=r"ledger\.db: cannot open"):
        Ledger(tmp_path / "ledger.db")
    (tmp_path / "file").write_text("")
    with pytest.raises(LedgerError, match="cannot open"):
        Ledger(tmp_path / "file" / "ledger.db")  # its parent is a file


def test_a_newer_schema_is_refused_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="newer than this clore-run reads"):
        Ledger(path)


def test_errors_after_open_name_the_file_too(ledger: Ledger) -> None:
    ledger._db.execute("DROP TABLE rentals")  # damage that shows up only on use
    with pytest.raises(LedgerError, match=r"ledger\.db: cannot record an intent: no such table"):
        ledger.record_intent("r", "j", 1, None, None, None)
    with pytest.raises(LedgerError, match="cannot read rentals"):
        ledger.unreleased()
