"""`clore-run hosts`: list what the history remembers, as a table or JSON, and forget it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from typer.testing import CliRunner

from runner.cli.hosts import register
from runner.core.hosts import HostEvent
from runner.stores.hosts import open_hosts

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def _history(tmp_path: Path) -> Path:
    now = time.time()
    with open_hosts(tmp_path / "hosts.db") as history:
        history.record(HostEvent("88028", "up", now - 3 * 3600, 41.0, "r1"))
        history.record(HostEvent("100201", "never_up", now - 2 * 3600, None, "r1"))
    return tmp_path / "ledger.db"


def test_lists_each_host_with_its_record_and_whether_it_is_skipped(tmp_path: Path) -> None:
    ledger = _history(tmp_path)
    result = runner.invoke(_app(), ["hosts", "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    header, first, second, market = result.stdout.splitlines()
    assert header.split()[:2] == ["HOST", "UP"]
    assert first.split()[:3] == ["100201", "0", "-"] and first.endswith("skipped")
    assert "never booted 2 h ago" in first
    assert second.split()[:4] == ["88028", "1", "41", "s"] and second.endswith("ok")
    assert market.startswith("market: 1 of 2 boots failed")
    listed = json.loads(runner.invoke(_app(), ["hosts", "--ledger", str(ledger), "--json"]).stdout)
    assert [h["host"] for h in listed] == ["100201", "88028"]
    assert listed[0]["skipped"] == "never booted 2 h ago"
    assert listed[1]["mean_boot_s"] == 41.0


def test_clear_forgets_one_host_or_all(tmp_path: Path) -> None:
    ledger = _history(tmp_path)
    one = runner.invoke(_app(), ["hosts", "--ledger", str(ledger), "--clear", "--host", "100201"])
    assert one.stdout.strip() == "forgot 1 event(s) of 100201"
    left = json.loads(runner.invoke(_app(), ["hosts", "--ledger", str(ledger), "--json"]).stdout)
    assert [h["host"] for h in left] == ["88028"]
    every = runner.invoke(_app(), ["hosts", "--ledger", str(ledger), "--clear"])
    assert every.stdout.strip() == "forgot 1 event(s) of every host"
    empty = runner.invoke(_app(), ["hosts", "--ledger", str(ledger)])
    assert empty.stdout.strip() == f"no host remembered in {tmp_path / 'hosts.db'}"


def test_a_history_that_is_not_a_database_is_set_aside_and_begun_afresh(
    tmp_path: Path,
) -> None:
    """It is only advice, and the Actions cache a pull request can write may have put it
    there: it must not stop the run, nor vanish (it stays beside, to look at)."""
    (tmp_path / "hosts.db").write_bytes(b"garbage" * 500)
    result = runner.invoke(_app(), ["hosts", "--ledger", str(tmp_path / "ledger.db")])
    assert result.exit_code == 0, result.output
    assert "set aside and begun afresh: it is not a readable SQLite database" in result.stderr
    assert (tmp_path / "hosts.db.refused").read_bytes() == b"garbage" * 500


def test_a_history_that_cannot_be_opened_exits_3_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "hosts.db").mkdir()  # not foreign content: nothing to set aside
    result = runner.invoke(_app(), ["hosts", "--ledger", str(tmp_path / "ledger.db")])
    assert result.exit_code == 3
    assert str(tmp_path / "hosts.db") in result.stderr
    assert "Traceback" not in result.output
