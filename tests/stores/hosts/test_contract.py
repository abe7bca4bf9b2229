"""The host history's contract, run against the SQLite file and the PostgreSQL database alike."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from runner.core.hosts import HostEvent
from runner.stores.hosts import HostHistory, HostHistoryError, hosts_target, open_hosts
from runner.stores.hosts.postgres import MIGRATIONS as PG_MIGRATIONS
from runner.stores.hosts.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from runner.stores.pg import Conn, PgDatabase
from tests.stores.conftest import Tick

T0 = 1_783_700_000.0


def _open(target: str, clock: Tick | None = None) -> HostHistory:
    where = target if target.startswith("postgresql:") else Path(target)
    return open_hosts(where, clock=clock or Tick())


def test_events_round_trip_and_survive_a_reopen(store_target: str) -> None:
    with _open(store_target) as hosts:
        hosts.record(HostEvent("88028", "never_up", T0 + 10, None, "run-1"))
        hosts.record(HostEvent("88028", "up", T0 + 20, 41.5, "run-2"))
        hosts.record(HostEvent("100504", "ssh_failed", T0 + 15, None, "run-1"))
        hosts.record(HostEvent("100504", "preempted", T0 + 30))
    with _open(store_target) as again:
        assert again.events() == [
            HostEvent("88028", "never_up", T0 + 10, None, "run-1"),
            HostEvent("100504", "ssh_failed", T0 + 15, None, "run-1"),
            HostEvent("88028", "up", T0 + 20, 41.5, "run-2"),
            HostEvent("100504", "preempted", T0 + 30, None, ""),
        ]
        assert [e.kind for e in again.events("88028")] == ["never_up", "up"]
        memory = again.memory()
        assert memory.hosts["88028"].ups == 1
        assert memory.hosts["100504"].ssh_failed == 1
        assert memory.skip_reason("100504") is not None  # its last boot failed: skipped
        assert memory.skip_reason("88028") is None  # it booted since


def test_clear_one_host_or_all(store_target: str) -> None:
    with _open(store_target) as hosts:
        for host in ("1", "2", "2"):
            hosts.record(HostEvent(host, "never_up", T0))
        assert hosts.clear("2") == 2
        assert [e.host for e in hosts.events()] == ["1"]
        assert hosts.clear() == 1
        assert hosts.events() == []


def test_old_events_are_pruned_when_the_store_opens(store_target: str) -> None:
    with _open(store_target) as hosts:
        hosts.record(HostEvent("old", "never_up", T0 - 40 * 86400))
        hosts.record(HostEvent("new", "never_up", T0 - 86400))
    with _open(store_target) as again:
        assert [e.host for e in again.events()] == ["new"]


def test_an_unknown_kind_is_refused(store_target: str) -> None:
    with _open(store_target) as hosts, pytest.raises(ValueError, match="unknown host event"):
        hosts.record(HostEvent("1", "exploded", T0))  # type: ignore[arg-type]


def test_the_file_lives_beside_the_ledger_and_a_database_holds_both() -> None:
    assert hosts_target(Path("/x/.clore-run/ledger.db")) == Path("/x/.clore-run/hosts.db")
    assert hosts_target("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_file_that_is_not_a_database_is_set_aside_and_a_fresh_one_begun(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "hosts.db"
    bad.write_bytes(b"not a database at all, just bytes" * 100)
    with _open(str(bad)) as hosts:
        assert hosts.events() == []
    assert (tmp_path / "hosts.db.refused").read_bytes().startswith(b"not a database")


def test_a_file_that_cannot_be_opened_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "hosts.db"
    bad.mkdir()
    with pytest.raises(HostHistoryError, match=str(bad)):
        _open(str(bad))


def test_an_events_image_and_pull_and_the_new_kinds_round_trip(store_target: str) -> None:
    pulled = HostEvent("88028", "up", T0 + 10, 470.0, "run-1", "pytorch/pytorch:2.5", 420.0)
    slow = HostEvent("100201", "slow", T0 + 11, 60.0, "run-1", "pytorch/pytorch:2.5")
    pulling = HostEvent("100504", "pulling", T0 + 12, 600.0, "run-1", "img:big", 540.0)
    with _open(store_target) as hosts:
        for event in (pulled, slow, pulling):
            hosts.record(event)
    with _open(store_target) as again:
        assert again.events() == [pulled, slow, pulling]


def _a_history_of_schema_1(target: str) -> None:
    """A host history as the clore-run before pulls were kept left it (schema 1)."""
    insert = "INSERT INTO host_events (host, kind, at, boot_s, run_id) VALUES ({})"
    rows = (("88028", "up", T0 + 1, 41.5, "old"), ("100504", "never_up", T0 + 2, None, "old"))
    if target.startswith("postgresql:"):
        db = PgDatabase(target, what="host history", error=HostHistoryError)
        db.migrate("hosts", PG_MIGRATIONS[:1])
        statement = insert.format(", ".join(["%s"] * 5)).encode()

        def fill(conn: Conn) -> None:
            for row in rows:
                conn.execute(statement, row)

        db.run("fill", fill)
        db.close()
        return
    with closing(sqlite3.connect(target)) as db, db:
        for statement in SQLITE_MIGRATIONS[0]:
            db.execute(statement)
        db.executemany(insert.format(", ".join(["?"] * 5)), rows)
        db.execute("PRAGMA user_version = 1")


def test_a_history_of_schema_1_keeps_its_events_and_takes_the_new_kinds(
    store_target: str,
) -> None:
    _a_history_of_schema_1(store_target)
    with _open(store_target) as hosts:
        assert hosts.events() == [
            HostEvent("88028", "up", T0 + 1, 41.5, "old"),
            HostEvent("100504", "never_up", T0 + 2, None, "old"),
        ]
        hosts.record(HostEvent("88028", "pulling", T0 + 3, 700.0, "new", "img:1", 650.0))
        assert hosts.events("88028")[-1].pull_s == 650.0
