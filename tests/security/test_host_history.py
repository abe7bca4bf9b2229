"""A poisoned host history (the Actions cache, which a pull request's run can write, restores
`hosts.db`): times in the future, values of the wrong type, a schema we did not make (a view
with an INSTEAD OF trigger), host text holding workflow commands. It never skips every host,
never crashes, never hangs, and what it says is printed inert."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from pathlib import Path

from typer.testing import CliRunner

from runner.core.hosts import HostEvent
from runner.stores.hosts import hosts_target, open_hosts, read_memory
from tests.backends.clore.test_offers_cmd import app_for
from tests.fakes.clore_api import FakeClore

runner = CliRunner()
DECADE_S = 10 * 365 * 86400.0


def _history(tmp_path: Path) -> tuple[Path, Path]:
    ledger = tmp_path / "state" / "ledger.db"
    path = Path(hosts_target(ledger))
    with open_hosts(path) as history:  # a file with our schema, as a run leaves it
        history.record(HostEvent("88028", "up", time.time() - 3600, 40.0))
    return ledger, path


def _poison(path: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for statement in statements:
            db.execute(statement)


def _offered(fake: FakeClore, ledger: Path) -> list[str]:
    result = runner.invoke(app_for(fake), ["offers", "--gpu", "3090", "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return [r.split()[0] for r in result.stdout.splitlines()[1:] if not r.startswith("#")]


def test_failures_dated_in_the_future_skip_no_host(fake_clore: FakeClore, tmp_path: Path) -> None:
    ledger, path = _history(tmp_path)
    future = time.time() + DECADE_S
    _poison(
        path,
        *(
            f"INSERT INTO host_events (host, kind, at, run_id) "
            f"VALUES ('{h}', 'never_up', {future}, 'x')"
            for h in ("88028", "100201")
        ),
    )
    offered = _offered(fake_clore, ledger)
    print(f"\na poisoned history (future failures): hosts still offered: {len(offered)} of 2")
    assert offered == ["88028", "100201"]


def test_every_host_failed_just_now_still_leaves_hosts_to_rent(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Valid-looking rows saying every fitting host failed a minute ago: advice, never a ban
    on the whole market."""
    ledger, path = _history(tmp_path)
    now = time.time() - 60
    _poison(
        path,
        *(
            f"INSERT INTO host_events (host, kind, at, run_id) "
            f"VALUES ('{h}', 'never_up', {now}, 'x')"
            for h in ("88028", "100201")
        ),
    )
    assert sorted(_offered(fake_clore, ledger)) == ["100201", "88028"]


def test_values_of_the_wrong_type_are_ignored_with_one_warning(tmp_path: Path) -> None:
    _ledger, path = _history(tmp_path)
    at = time.time() - 600
    into = "INSERT INTO host_events (host, kind, at, boot_s, run_id) VALUES"
    _poison(
        path,
        f"{into} ('1', 'never_up', 'yesterday', NULL, '')",
        f"{into} ('2', 'up', {at}, 'fast', '')",
        f"{into} (3, 'up', {at}, 1.0, X'00')",
    )
    memory, note = read_memory(path)
    assert sorted(memory.hosts) == ["88028"]
    assert note.count("ignored") == 1 and "3 host history row(s) ignored" in note


def test_a_schema_we_did_not_make_is_set_aside_not_run(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """A view in the table's place, with an INSTEAD OF trigger that would spin for ever on the
    first event recorded: the file is set aside unread and a fresh history begun."""
    ledger, path = _history(tmp_path)
    _poison(
        path,
        "ALTER TABLE host_events RENAME TO real_events",
        "CREATE VIEW host_events AS SELECT * FROM real_events",
        "CREATE TRIGGER spin INSTEAD OF INSERT ON host_events BEGIN "
        "SELECT count(*) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT i FROM n); END",
    )
    with open_hosts(path) as history:
        history.record(HostEvent("88028", "up", time.time() - 10, 30.0))  # returns at once
        assert "set aside" in " ".join(history.take_notes())
    assert path.with_name("hosts.db.refused").exists()
    assert sorted(_offered(fake_clore, ledger)) == ["100201", "88028"]


def test_host_text_is_printed_inert_by_clore_run_hosts(tmp_path: Path) -> None:
    import typer  # the stand-in CLI's own

    from runner.cli.hosts import register  # only this test drives the hosts command

    _ledger, path = _history(tmp_path)
    _poison(
        path,
        "INSERT INTO host_events (host, kind, at, run_id) VALUES "
        f"('::error title=x::pwned' || char(10) || '::warning::again', 'up', {time.time()}, '')",
    )
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI."""

    register(app)
    result = runner.invoke(app, ["hosts", "--ledger", str(path.with_name("ledger.db"))])
    assert result.exit_code == 0, result.output
    assert "pwned" in result.stdout
    assert not re.search(r"^\s*::", result.stdout, re.M), result.stdout
