"""`clore-run pool ...`, `run --pool` flag checks and `cleanup --coordinator` reaping."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.cli import main
from runner.cli.cleanup import register
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_api import FakeClore
from tests.stores.pg_helpers import at
from tests.stores.pools.test_processes import FIRST_SERVER, LATER, Worker, _holder, market

__all__ = ["market"]  # the fixture


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert isinstance(info.value.code, int)
    return info.value.code, out, err


def test_pool_create_show_set(
    capsys: pytest.CaptureFixture[str], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = cli(
        capsys, "pool", "create", "org", "--budget", "25", "--max-servers", "3",
        "--coordinator", pg_url,
    )  # fmt: skip
    assert code == 0 and "org: $25.00 in total, at most 3 servers | 0 held" in out
    monkeypatch.setenv("CLORE_RUN_COORDINATOR", pg_url)
    code, out, _ = cli(capsys, "pool", "set", "org", "--per-day", "--max-servers", "5")
    assert code == 0 and "$25.00 per UTC day, at most 5 servers" in out
    code, out, _ = cli(capsys, "pool", "show")
    assert code == 0 and out.startswith("org: ")
    code, _, err = cli(capsys, "pool", "show", "nope")
    assert code == 2 and "no pool named 'nope'" in err


@pytest.mark.slow
def test_pool_commands_and_flags_say_what_is_wrong(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLORE_RUN_COORDINATOR", raising=False)
    code, _, err = cli(capsys, "pool", "show")
    assert code == 2 and "no coordinator given" in err
    code, _, err = cli(capsys, "pool", "show", "--coordinator", "mysql://x/y")
    assert code == 2 and "is not a PostgreSQL URL" in err
    code, _, err = cli(
        capsys, "pool", "create", "bad name", "--budget", "1", "--max-servers", "1",
        "--coordinator", "postgresql://127.0.0.1:1/none",
    )  # fmt: skip
    assert code == 2 and "pool name 'bad name' is not valid" in err
    # A password on the command line is refused (ps shows it to every local user) ...
    code, _, err = cli(
        capsys, "pool", "show", "--coordinator", "postgresql://u:secret@127.0.0.1:1/none"
    )
    assert code == 2 and "holds a password" in err and "PGPASSWORD" in err
    assert "secret" not in err
    # ... and taken from the environment, where it is never shown either.
    monkeypatch.setenv("CLORE_RUN_COORDINATOR", "postgresql://u:secret@127.0.0.1:1/none")
    code, _, err = cli(capsys, "pool", "show")
    monkeypatch.delenv("CLORE_RUN_COORDINATOR")
    assert code == 3 and "secret" not in err
    # libpq's nested wording (host, port, the socket's text, the phrase twice) is not shown.
    assert ": cannot connect: connection refused\nhint: is the server up" in err
    assert "cannot connect: cannot connect" not in err and "port 1 failed" not in err
    pipeline = tmp_path / "p.yml"
    pipeline.write_text("jobs:\n  a: {run: 'true'}\n")
    code, _, err = cli(capsys, "run", str(pipeline), "--backend", "local", "--pool", "org")
    assert code == 2 and "use --backend clore" in err
    code, _, err = cli(
        capsys, "run", str(pipeline), "--backend", "clore", "--coordinator",
        "postgresql://127.0.0.1:1/x", "--ledger", str(tmp_path / "l.db"),
    )  # fmt: skip
    assert code == 2 and "--ledger" in err and "shared database" in err


def test_cleanup_with_a_coordinator_reaps_a_killed_holder(
    pg_url: str, market: FakeClore, tmp_path: Path
) -> None:
    PostgresPools(pg_url).create("org", 10.0, per_day=False, max_servers=4)
    holder: Worker = _holder(pg_url, market, "run-dead", [FIRST_SERVER])
    try:
        holder.expect("holding")
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait(timeout=10)
    finally:
        holder.stop()
    app = typer.Typer()
    register(app, client_factory=market.client)
    app.command("noop")(lambda: None)  # a group, so that `cleanup` is a subcommand
    later = at(pg_url, LATER)
    result = CliRunner().invoke(app, ["cleanup", "--coordinator", later])
    assert result.exit_code == 0, result.output
    assert "reaped run-dead (pool org): 1 rental(s) reconciled, 1 reservation(s)" in result.output
    assert market.live_orders() == [] and PostgresLedger(pg_url).unreleased() == []
    again = CliRunner().invoke(app, ["cleanup", "--coordinator", later])
    assert again.exit_code == 0 and "nothing (more) to reap" in again.output


def cleanup_app(market: FakeClore) -> typer.Typer:
    app = typer.Typer()
    register(app, client_factory=market.client)
    app.command("noop")(lambda: None)  # a group, so that `cleanup` is a subcommand
    return app


def killed(holder: Worker) -> None:
    try:
        holder.expect("holding")
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait(timeout=10)
    finally:
        holder.stop()


def test_cleanup_right_after_kill_9_reaps_a_holder_of_this_host_at_once(
    pg_url: str, market: FakeClore
) -> None:
    """Issue 24: right after a run holding two servers was killed, `cleanup --coordinator`
    said "nothing (more) to reap" and both orders stayed active: the lease had not expired.
    The holder was a process of this host, and it is gone: proven dead, reaped now."""
    PostgresPools(pg_url).create("org", 10.0, per_day=False, max_servers=4)
    killed(_holder(pg_url, market, "run-dead", [FIRST_SERVER, FIRST_SERVER + 1]))
    [lease] = PostgresPools(pg_url).live_leases()  # not expired: ttl 30 s
    assert (lease.holder, lease.unsettled) == ("run-dead", 2)
    assert len(market.live_orders()) == 2
    dry = ["cleanup", "--coordinator", pg_url, "--dry-run"]
    looked = CliRunner().invoke(cleanup_app(market), dry)
    assert looked.exit_code == 0, looked.output
    assert "run-dead (pool org) holds 2 server(s); its process is gone: would reap it at once" in (
        looked.output
    )
    assert len(market.live_orders()) == 2 and market.calls("cancel_order") == []
    result = CliRunner().invoke(cleanup_app(market), ["cleanup", "--coordinator", pg_url])
    assert result.exit_code == 0, result.output
    assert "reaped run-dead (pool org): 2 rental(s) reconciled" in result.output
    assert result.output.endswith("pool leases: nothing (more) to reap\n")
    assert market.live_orders() == [] and PostgresLedger(pg_url).unreleased() == []
    assert PostgresPools(pg_url).usage("org").servers == 0


def test_a_live_looking_lease_is_reported_or_waited_for_never_nothing_to_reap(
    pg_url: str, market: FakeClore
) -> None:
    """A killed holder that cannot be proven dead from here (its lease names another host):
    without --wait, exit 3 and when to run again; with --wait, its lease expires (at most a
    ttl later) and it is reaped."""
    pools = PostgresPools(pg_url)
    pools.create("org", 10.0, per_day=False, max_servers=4)
    killed(_holder(pg_url, market, "run-elsewhere", [FIRST_SERVER]))
    elsewhere = '{"host": "another-runner", "pid": 7, "started": 1, "where": "b pid:[1]"}'
    pools.db.run(
        "a holder of another host",
        lambda conn: conn.execute(
            "UPDATE leases SET owner = %s, expires_at = clore_run_now() + interval '600 s'",
            (elsewhere,),
        ),
    )
    result = CliRunner().invoke(cleanup_app(market), ["cleanup", "--coordinator", pg_url])
    assert result.exit_code == 3, result.output
    assert "not reaped: run-elsewhere (pool org) holds 1 server(s) that may bill" in result.output
    assert re.search(r"again in (599|600) s, or with --wait", result.output)
    assert "nothing (more) to reap" not in result.output
    assert len(market.live_orders()) == 1
    pools.db.run(
        "a lease about to expire",
        lambda conn: conn.execute(
            "UPDATE leases SET ttl_s = 2, expires_at = clore_run_now() + interval '1.5 s'"
        ),
    )
    waited = CliRunner().invoke(cleanup_app(market), ["cleanup", "--coordinator", pg_url, "--wait"])
    assert waited.exit_code == 0, waited.output
    assert re.search(r"waiting \d s for run-elsewhere to expire", waited.output)
    assert "reaped run-elsewhere (pool org): 1 rental(s) reconciled" in waited.output
    assert market.live_orders() == []


def test_a_holder_running_on_this_host_is_left_alone(pg_url: str, market: FakeClore) -> None:
    """Its process is alive, with the start time its lease recorded: it gives its servers
    back itself, so cleanup leaves them, says so, and has nothing to fail on."""
    PostgresPools(pg_url).create("org", 10.0, per_day=False, max_servers=4)
    holder = _holder(pg_url, market, "run-alive", [FIRST_SERVER])
    try:
        holder.expect("holding")
        result = CliRunner().invoke(cleanup_app(market), ["cleanup", "--coordinator", pg_url])
    finally:
        holder.stop()
    assert result.exit_code == 0, result.output
    assert f"left alone: run-alive (pool org) is running (pid {holder.proc.pid} on " in (
        result.output
    )
    assert len(market.live_orders()) == 1 and market.calls("cancel_order") == []
