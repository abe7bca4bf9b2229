"""The SQLite ledger's own: the file, its durability settings, two processes, bad files."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from runner.errors import InfrastructureError
from runner.stores.ledger import LedgerError
from runner.stores.ledger.sqlite import BUSY_TIMEOUT_MS, SCHEMA_VERSION, SqliteLedger
from tests.stores.conftest import Tick


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteLedger:
    return SqliteLedger(tmp_path / "ledger.db", clock=Tick())


def test_parent_folders_are_made_and_a_reopen_sees_every_write(tmp_path: Path) -> None:
    # The rules themselves are the contract tests' (tests/stores/ledger/test_contract.py),
    # run against this file and the PostgreSQL ledger alike.
    path = tmp_path / "nested" / "dir" / "ledger.db"
    with SqliteLedger(path, clock=Tick()) as ledger:
        rid = ledger.record_intent("run-1", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
        ledger.set_order(rid, "1939941")
    with SqliteLedger(path) as again:
        [done] = again.rentals("run-1")
        assert (done.id, done.order_id, done.state) == (rid, "1939941", "ordered")


def test_wal_busy_timeout_and_schema_version_are_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SqliteLedger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    ledger = SqliteLedger(path)
    assert ledger._db.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    ledger.close()


def test_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    SqliteLedger().close()
    assert (tmp_path / ".clore-run" / "ledger.db").is_file()


@pytest.mark.slow
def test_two_ledgers_on_one_file_write_at_once(tmp_path: Path) -> None:
    # A run and a `cleanup` are two processes: two connections contending for the write lock.
    path = tmp_path / "ledger.db"
    first, second = SqliteLedger(path), SqliteLedger(path)
    errors: list[BaseException] = []

    def writer(ledger: SqliteLedger, run: str) -> None:
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
        SqliteLedger(path)
    assert isinstance(caught.value, InfrastructureError) and caught.value.exit_code == 3
    assert str(path) in str(caught.value) and "not a database" in str(caught.value)
    assert "move it aside" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ledger.db").mkdir()  # a folder where the file should be
    with pytest.raises(LedgerError, match=r"ledger\.db: cannot open"):
        SqliteLedger(tmp_path / "ledger.db")
    (tmp_path / "file").write_text("")
    with pytest.raises(LedgerError, match="cannot open"):
        SqliteLedger(tmp_path / "file" / "ledger.db")  # its parent is a file


def test_a_newer_schema_is_refused_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SqliteLedger(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="newer than this clore-run reads"):
        SqliteLedger(path)


def test_errors_after_open_name_the_file_too(ledger: SqliteLedger) -> None:
    ledger._db.execute("DROP TABLE rentals")  # damage that shows up only on use
    with pytest.raises(LedgerError, match=r"ledger\.db: cannot record an intent: no such table"):
        ledger.record_intent("r", "j", 1, None, None, None)
    with pytest.raises(LedgerError, match="cannot read rentals"):
        ledger.unreleased()
