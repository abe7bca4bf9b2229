"""`clore-run doctor [--canary]` through typer's CliRunner, against the fake API and a real sshd."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from runner.backends.clore.api import CloreClient
from runner.backends.clore.canary_capture import redact
from runner.backends.clore.doctor import CanaryTools
from runner.backends.clore.rental import ProvisionOptions
from runner.backends.ssh.connection import ConnectOptions
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.cli.doctor import register
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import API_KEY, FakeClore, Faults
from tests.fakes.fake_clock import FakeClock
from tests.processes import default_signals, marked_env
from tests.sshd_fixture import SshServer

runner = CliRunner()


def app_for(fake: FakeClore, sshd: SshServer | None = None, **client_kwargs: object) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI, so `doctor` stays a subcommand."""

    def tools(client: CloreClient, ledger_path: Path) -> CanaryTools:
        assert sshd is not None
        key = ClientKey.generate()
        sshd.authorize(key.public_line)  # what Clore does with `ssh_key`
        clock = fake.clock
        options = ProvisionOptions(
            online_timeout_s=240.0,
            pause=lambda seconds, _cancel: clock.sleep(seconds),
            ssh=ConnectOptions(tries=3, backoff_s=0.05, max_backoff_s=0.2),
        )
        return CanaryTools(client, clock, SqliteLedger(ledger_path), key, HostKeyStore(), options)

    register(app, lambda: fake.client(**client_kwargs), tools)
    return app


def test_doctor_lists_key_balances_fees_and_fitting_offers(fake_clore: FakeClore) -> None:
    result = runner.invoke(app_for(fake_clore), ["doctor", "--currency", "USD-Blockchain"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "key: accepted by the Clore API" in out
    assert "balances: CLORE-Blockchain 200000, USD-Blockchain 100, bitcoin 0.01" in out
    assert "renter fee 5 % on-demand, 1.25 % spot (account rates)" in out
    assert "creation fee 0.1 on-demand, 0.1 spot USD-Blockchain" in out
    # 100605 quotes no USD-Blockchain price and 100201 takes none; 100403 is rented.
    assert "marketplace: 8 servers listed, 5 fit 1x any GPU, on-demand, paid in USD" in out
    assert "doctor: all checks passed" in out
    assert API_KEY not in result.output
    assert fake_clore.calls("create_order") == []


def test_doctor_with_a_wrong_key_exits_3_without_printing_it(fake_clore: FakeClore) -> None:
    result = runner.invoke(app_for(fake_clore, api_key="wrong-key-123"), ["doctor", "--canary"])
    assert result.exit_code == 3, result.output
    assert "refused the key" in result.output
    assert "wrong-key-123" not in result.output and API_KEY not in result.output
    assert fake_clore.calls("create_order") == []


def test_doctor_says_when_nothing_fits_or_the_wallet_is_empty(fake_clore: FakeClore) -> None:
    fake_clore.balances["bitcoin"] = 0.0
    args = ["doctor", "--gpu", "H100", "--currency", "bitcoin"]
    result = runner.invoke(app_for(fake_clore), args)
    assert result.exit_code == 3, result.output
    assert "nothing to pay with in bitcoin" in result.output
    assert "none fits 1x H100" in result.output


def test_doctor_without_renter_fees_uses_the_documented_rates_and_says_so(
    fake_clore: FakeClore,
) -> None:
    fake_clore.fail_next("renter_fees", Faults.INVALID_ENDPOINT)
    result = runner.invoke(app_for(fake_clore), ["doctor"])
    assert result.exit_code == 0, result.output
    assert "5 % on-demand, 1.25 % spot (documented rates)" in result.stdout
    assert "note: your fee rates could not be read: Clore API (reading your fees)" in result.stdout
    assert "renter_fees" not in result.output  # an endpoint's name is the API's, not ours


@pytest.fixture
def canary_fake(fake_clore: FakeClore, sshd_server: SshServer) -> FakeClore:
    fake_clore.ssh_host = "127.0.0.1"
    fake_clore.ssh_port = sshd_server.port
    return fake_clore


def test_canary_rents_once_connects_gives_back_and_prints_the_billed_cost(
    canary_fake: FakeClore, sshd_server: SshServer, fake_clock: FakeClock, tmp_path: Path
) -> None:
    before = canary_fake.balances["USD-Blockchain"]
    args = ["doctor", "--canary", "--currency", "USD-Blockchain", "--gpu", "3090"]
    result = runner.invoke(
        app_for(canary_fake, sshd_server), [*args, "--ledger", str(tmp_path / "l.db")]
    )
    print("\n" + result.output)
    assert result.exit_code == 0, result.output
    (order,) = canary_fake.orders.values()
    assert not order.live and canary_fake.live_orders() == []
    assert order.image == "nvidia/cuda:12.8.0-base-ubuntu22.04"  # an ordinary image...
    (create,) = canary_fake.calls("create_order")
    assert create.body["autossh_entrypoint"] is True  # ...that answers SSH all the same
    out = result.stdout
    assert f"order {order.id} online after " in out and "SSH ready after" in out
    assert "nvidia-smi -L: " in out  # the loopback sshd has no GPU: it says there is none
    billed = before - canary_fake.balances["USD-Blockchain"]
    assert f"cost as billed ${billed:.6f}" in out
    assert "creation fee $0.000000" in out  # cancelled within 10 minutes
    assert canary_fake.lived_s(order.id) < 300
    assert canary_fake.violations == []  # one client, one limiter: doctor's reads and the canary
    assert not SqliteLedger(tmp_path / "l.db").unreleased()


def test_canary_whose_server_never_answers_ssh_exits_3_with_nothing_left(
    canary_fake: FakeClore, sshd_server: SshServer, tmp_path: Path
) -> None:
    canary_fake.ssh_port = canary_fake.no_sshd_port
    args = ["doctor", "--canary", "--currency", "USD-Blockchain", "--gpu", "3090"]
    result = runner.invoke(
        app_for(canary_fake, sshd_server), [*args, "--ledger", str(tmp_path / "l.db")]
    )
    assert result.exit_code == 3, result.output
    assert "sshd never answered on 127.0.0.1" in result.output
    assert len(canary_fake.orders) == 1 and canary_fake.live_orders() == []
    assert not SqliteLedger(tmp_path / "l.db").unreleased()


def test_the_weekly_canary_workflow_runs_the_canary_and_always_cleans_up() -> None:
    from tests.gha import load_yaml

    flow = load_yaml(Path(__file__).resolve().parents[3] / "workflows/clore-canary.yml")
    (cron,) = (entry["cron"] for entry in flow["on"]["schedule"])
    assert cron.split()[2:] == ["*", "*", "1"]  # weekly: every Monday
    steps = flow["jobs"]["canary"]["steps"]
    runs = [s for s in steps if "run" in s]
    canary = next(s for s in runs if "doctor --canary" in s["run"])
    assert canary["env"]["CLORE_API_KEY"] == "${{ secrets.CLORE_API_KEY }}"
    assert 'exit "$status"' in canary["run"]  # a failing canary fails the workflow
    cleanup = runs[-1]
    assert cleanup["run"] == "clore-run cleanup" and cleanup["if"].startswith("always()")
    assert "--capture canary-capture.jsonl" in canary["run"]
    (upload,) = (s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["path"] == "canary-capture.jsonl"
    assert upload["if"].startswith("always()")  # a failed canary's capture is the one to read


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_canary_and_cancels_its_order(
    fake_clore: FakeClore, tmp_path: Path, sig: signal.Signals
) -> None:
    """Issue 24: SIGTERM exited 143 at once and left the canary's order live; SIGINT was
    ignored and the canary ran on to "all checks passed". The signal comes while the create
    is in flight (the fake has made the order, its answer not yet sent): exit 130, and the
    order is cancelled. The real process paces itself on the real clock: the fake's limits are
    off, and its clock stands still, so the order stays booting until the signal."""
    fake_clore.enforce_rate_limits, fake_clore.appear_after_s = False, 0.0
    created = threading.Event()
    fake_clore.after_create = lambda _order: created.set()
    env = marked_env(
        {"CLORE_API_KEY": API_KEY, "CLORE_API_URL": fake_clore.url, "HOME": str(tmp_path)}
    )
    command = [sys.executable, "-m", "runner", "doctor", "--canary"]
    with subprocess.Popen(
        [*command, "--ledger", str(tmp_path / "ledger.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        preexec_fn=default_signals,
    ) as proc:
        try:
            assert created.wait(60), "the canary never sent its create"
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, out + err
    assert f"clore-run: interrupted by {sig.name}" in err and "nothing of it is left rented" in err
    assert "all checks passed" not in out and "Traceback" not in err
    [order] = fake_clore.orders.values()
    assert fake_clore.live_orders() == []
    assert [r.body["id"] for r in fake_clore.calls("cancel_order")] == [order.id]


# --- the canary's capture: what my_orders answered, and which assumptions held ------------


def _canary(fake: FakeClore, sshd: SshServer, tmp_path: Path, *extra: str) -> Result:
    args = ["doctor", "--canary", "--currency", "USD-Blockchain", "--gpu", "3090", *extra]
    return runner.invoke(app_for(fake, sshd), [*args, "--ledger", str(tmp_path / "l.db")])


def _states(output: str) -> dict[str, str]:
    """The table's rows: assumption -> held / contradicted / not seen."""
    rows = {}
    for line in output.splitlines():
        for state in ("held", "contradicted", "not seen"):
            head, sep, _ = line.strip().partition(f"  {state}  ")
            if sep and ":" in head:
                rows[head.strip()] = state
    return rows


def test_the_canary_captures_every_reply_and_judges_each_assumption(
    canary_fake: FakeClore, sshd_server: SshServer, tmp_path: Path
) -> None:
    canary_fake.echo_order_end = True
    capture = tmp_path / "capture" / "canary.jsonl"
    result = _canary(canary_fake, sshd_server, tmp_path, "--capture", str(capture))
    print("\n" + result.output)
    assert result.exit_code == 0, result.output
    (order,) = canary_fake.orders.values()
    assert canary_fake.live_orders() == []
    states = _states(result.output)
    assert len(states) == 10 and "contradicted" not in states.values(), result.output
    assert states["tag echo: http_port is the tag as sent, a string"] == "held"
    assert states["after its cancel: gone from the live list, listed as expired"] == "held"
    assert states["order_end: on the ended order, at its cancel"] == "held"
    assert "canary: the server was given back" in result.output
    assert "canary: +" in result.output  # progress, as it goes
    lines = [json.loads(line) for line in capture.read_text().splitlines()]
    looks, create = lines[:-1], lines[-1]["create"]
    assert create["order_id"] == order.id and create["tag"] is not None
    assert {"t_s", "phase", "return_completed", "orders", "other_orders"} <= set(looks[0])
    phases = [look["phase"] for look in looks]
    assert phases[0] == "renting" and phases[-1] == "after the cancel"
    assert any(look["return_completed"] for look in looks)
    ended = [o for look in looks for o in look["orders"] if o.get("expired")]
    assert ended and ended[-1]["id"] == order.id
    assert API_KEY not in capture.read_text()


def test_a_contradicted_assumption_fails_the_canary_after_giving_the_server_back(
    canary_fake: FakeClore, sshd_server: SshServer, tmp_path: Path
) -> None:
    canary_fake.tag_echo = "port/http"
    result = _canary(canary_fake, sshd_server, tmp_path)
    assert result.exit_code == 3, result.output
    assert canary_fake.live_orders() == []
    assert "canary: the server was given back" in result.output
    states = _states(result.output)
    assert states["tag echo: http_port is the tag as sent, a string"] == "contradicted"
    assert "(read tolerantly)" in result.output
    assert "1 assumption(s) contradicted by the market" in result.output


def test_a_spot_canary_checks_the_spot_echo(
    canary_fake: FakeClore, sshd_server: SshServer, tmp_path: Path
) -> None:
    canary_fake.echo_spot = False
    result = _canary(canary_fake, sshd_server, tmp_path, "--spot")
    assert result.exit_code == 3, result.output
    assert canary_fake.live_orders() == [] and next(iter(canary_fake.orders.values())).spot
    assert _states(result.output)["spot: echoed on a spot order"] == "contradicted"


def test_capture_needs_the_canary(fake_clore: FakeClore, tmp_path: Path) -> None:
    result = runner.invoke(app_for(fake_clore), ["doctor", "--capture", str(tmp_path / "c")])
    assert result.exit_code == 2 and "--capture needs --canary" in result.output


def test_a_captured_order_keeps_no_secret() -> None:
    order = {"id": 1, "auto_login": "root:pw", "jupyter_token": "t", "env": {"A": "b"}, "si": 2}
    assert redact(order) == {
        "id": 1,
        "auto_login": "***",
        "jupyter_token": "***",
        "env": "***",
        "si": 2,
    }
