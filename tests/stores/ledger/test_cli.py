"""`clore-run run --ledger URL` and `clore-run cleanup --ledger URL` through the command line:
the flag reaches the PostgreSQL ledger, a run writes its rentals there and gives them back, and a
cleanup anywhere cancels what a dead run left in it."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.clore import factory
from runner.backends.clore.rental import ProvisionOptions
from runner.backends.ssh.keys import ClientKey
from runner.cli import main
from runner.cli.cleanup import register
from runner.stores.ledger import Rental
from runner.stores.ledger.postgres import PostgresLedger
from tests.fakes.clore_api import FakeClore
from tests.fakes.fake_clock import FakeClock
from tests.sshd_fixture import SshServer


def test_run_with_a_ledger_url_writes_and_releases_its_rentals_there(
    pg_url: str,
    fake_clore: FakeClore,
    fake_clock: FakeClock,
    sshd_server: SshServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_clore.ssh_host, fake_clore.ssh_port = "127.0.0.1", sshd_server.port
    fake_clore.appear_after_s = 0.0
    key = ClientKey.generate()
    sshd_server.authorize(key.public_line)  # what Clore does with the order's `ssh_key`
    # The factory's own client, clock and key, but on the fake's clock (its pacing is the
    # real API's, seconds apart; its servers boot in fake seconds) and with the key the sshd
    # knows.
    monkeypatch.setattr(factory.CloreClient, "from_env", lambda: fake_clore.client())
    monkeypatch.setattr(factory, "SystemClock", lambda: fake_clock)
    waits = ProvisionOptions(pause=lambda seconds, _cancel: fake_clock.sleep(seconds))
    real_provisioner = factory.Provisioner
    monkeypatch.setattr(factory, "Provisioner", lambda **kw: real_provisioner(**kw, options=waits))
    monkeypatch.setattr(factory.ClientKey, "generate", lambda: key)
    monkeypatch.delenv("CLORE_RUN_COORDINATOR", raising=False)
    monkeypatch.chdir(tmp_path)
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(
        "currency: USD-Blockchain\nbudget: 5\n"
        "jobs:\n  a: {run: echo hello, timeout-minutes: 5, workspace: false}\n"
    )
    with pytest.raises(SystemExit) as done:
        main(["run", str(pipeline), "--backend", "clore", "--ledger", pg_url, "--out", "out"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, out + err
    assert not (tmp_path / ".clore-run" / "ledger.db").exists()  # not the default file
    # The fake's cheapest host refuses the currency: that intent failed (nothing was made),
    # the next one rented the order the job ran on, and gave it back.
    [order_id] = fake_clore.orders
    assert [(r.job_id, r.state, r.order_id) for r in _all_rentals(pg_url)] == [
        ("a", "failed", None),
        ("a", "released", str(order_id)),
    ]
    assert fake_clore.live_orders() == []


def _all_rentals(url: str) -> list[Rental]:
    import psycopg

    with psycopg.connect(url) as conn:
        [run_id] = [r[0] for r in conn.execute("SELECT DISTINCT run_id FROM rentals")]
    with PostgresLedger(url) as ledger:
        return list(ledger.rentals(run_id))


def test_cleanup_with_a_ledger_url_cancels_what_a_dead_run_left(
    pg_url: str, fake_clore: FakeClore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLORE_RUN_COORDINATOR", raising=False)
    with PostgresLedger(pg_url) as ledger:  # a run killed while it held a server
        rid = ledger.record_intent("run-1", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
        order = fake_clore.add_order(88028, age_s=600)
        ledger.set_order(rid, str(order))
        ledger.set_state(rid, "running")
    app = typer.Typer()
    register(app, client_factory=fake_clore.client)
    app.command("noop")(lambda: None)  # a group, so that `cleanup` is a subcommand
    result = CliRunner().invoke(app, ["cleanup", "--ledger", pg_url])
    assert result.exit_code == 0, result.output
    assert f"order {order}  cancelled; marked released" in result.output
    assert fake_clore.live_orders() == []
    assert PostgresLedger(pg_url).unreleased() == []
    again = CliRunner().invoke(app, ["cleanup", "--ledger", pg_url])
    assert again.exit_code == 0 and "every rental in postgresql://" in again.output
