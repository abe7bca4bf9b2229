"""The host history's contract, run against the SQLite file and the PostgreSQL database alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.core.hosts import HostEvent
from runner.stores.hosts import HostHistory, HostHistoryError, hosts_target, open_hosts
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


def test_a_damaged_file_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "hosts.db"
    bad.write_bytes(b"not a database at all, just bytes" * 100)
    with pytest.raises(HostHistoryError, match=str(bad)):
        _open(str(bad))
