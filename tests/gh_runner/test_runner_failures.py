"""What goes wrong around a runner: refused tokens and groups, a signal while the server boots,
a job that outlives `max-minutes`, a stop job that never ran (the cron reaper), bad records."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.runner_record import RECORD_FILE
from runner.cli import cleanup as cleanup_cli
from runner.gh_runner import start as start_module
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.github_runners import ACTIONS_TOKEN
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host, runner_pid, wait_exit
from tests.gh_runner.harness import host as host


@pytest.mark.parametrize(
    ("token", "status"),
    [(ACTIONS_TOKEN, "403"), ("ghp_not_a_token_at_all_123", "401")],
    ids=["workflow GITHUB_TOKEN", "unknown token"],
)
def test_a_token_that_cannot_administer_runners_rents_nothing(
    host: Host, token: str, status: str
) -> None:
    env = {**host.env, "CLORE_RUNNER_TOKEN": token}
    result = host.invoke(host.start_args(), env)
    assert result.exit_code == 3, result.output
    words = " ".join(result.output.split())
    assert f"this token cannot administer runners on repository octo/gpu-lib ({status}" in words
    assert "'Administration: write'" in words and "GITHUB_TOKEN cannot" in words
    assert host.fake.calls("create_order") == [] and token not in result.output


@pytest.mark.parametrize(
    ("group", "words"),
    [
        ("0", "runner_group_id is required: 1 is the default group"),
        ("9", "runner group 9 is not one repository octo/gpu-lib can use (403"),
        ("77", "runner group 77 is not one repository octo/gpu-lib can use (404"),
    ],
)
def test_a_group_github_refuses_rents_nothing(host: Host, group: str, words: str) -> None:
    result = host.invoke(host.start_args("--runner-group", group))
    assert result.exit_code == 3, result.output
    assert words in " ".join(result.output.split())
    assert host.fake.calls("create_order") == [] and host.github.runners == {}


def test_sigterm_while_the_server_boots_cancels_the_order_and_the_registration(
    host: Host,
) -> None:
    host.fake.after_create = lambda _order: os.kill(os.getpid(), signal.SIGTERM)
    result = host.invoke(host.start_args())
    assert result.exit_code == 130, result.output
    (order,) = host.fake.orders.values()
    assert not order.live and host.fake.live_orders() == []
    assert host.github.runners == {} and len(host.github.removed) == 1
    assert "interrupted" in result.output
    assert not SqliteLedger(host.tmp / "ledger.db").unreleased()
    assert not (host.tmp / "record.json").exists()


def test_sigterm_while_the_runner_installs_gives_back_the_server_and_the_registration(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancelled = threading.Event()
    host.fake.on_order_end = lambda order: (host.ended.__setitem__(order.id, 0.0), cancelled.set())
    real_install = start_module.install_runner

    def install_under_a_signal(*args: object) -> str:  # the signal comes while it installs
        os.kill(os.getpid(), signal.SIGTERM)
        cancelled.wait(10.0)  # ...and the install lasts until the server is gone
        return real_install(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(start_module, "install_runner", install_under_a_signal)
    result = host.invoke(host.start_args())
    assert result.exit_code == 130, result.output
    assert cancelled.is_set() and host.fake.live_orders() == []
    assert host.github.runners == {} and len(host.github.removed) == 1
    assert not SqliteLedger(host.tmp / "ledger.db").unreleased()


def test_sigterm_while_the_package_downloads_here_rents_nothing(host: Host) -> None:
    """The package is fetched on this machine before anything is rented: a signal then ends
    the start with nothing to give back but the registration."""

    def slow_download() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    host.github.on_download = slow_download
    result = host.invoke(host.start_args())
    assert result.exit_code == 130, result.output
    assert host.fake.calls("create_order") == [] and host.fake.live_orders() == []
    assert host.github.runners == {} and len(host.github.removed) == 1


def test_a_job_past_max_minutes_is_stopped_on_the_server_and_stop_still_cancels(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_install = start_module.install_runner

    def install_with_a_short_cap(*args: object) -> str:
        # The cap as the server sees it, shortened to 3 s of real time (the fake clock is not
        # the server's): what is tested is that `timeout` ends the runner there.
        return real_install(*args[:4], 3.0)  # type: ignore[arg-type]

    monkeypatch.setattr(start_module, "install_runner", install_with_a_short_cap)
    host.github.job = "run:60"  # the user's job would run a minute
    started = host.invoke(host.start_args("--max-minutes", "1"))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("connect", rental.runner_id)
    pid = runner_pid(host.home / rental.label)
    assert pid is not None and wait_exit(pid, 15.0), "the runner outlived its cap"
    assert not host.github.did("done", rental.runner_id)
    host.clock.unix = rental.cap_unix + 30  # the stop job runs after the job failed
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output
    assert "still running a job: its server was cancelled under it" in stopped.output
    assert host.fake.live_orders() == []


def test_the_install_gives_the_runner_the_time_left_to_the_cap(host: Host) -> None:
    started = host.invoke(host.start_args("--max-minutes", "30"))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    params = dict(
        line.split("=", 1) for line in (host.home / rental.label / "params").read_text().split()
    )
    limit_s = int(params["limit_s"])
    assert 30 * 60 - 300 < limit_s < 30 * 60  # the boot came out of it
    assert params["sha256"] == host.github.package_sha256 and params["user"] == "root"
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    assert host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")]).exit_code == 0


def _reaper(host: Host, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("GITHUB_TOKEN", ACTIONS_TOKEN)  # the reaper needs only actions: read
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/gpu-lib")
    monkeypatch.setenv("GITHUB_API_URL", host.github.url)
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """The stand-in CLI."""

    cleanup_cli.register(app, host.fake.client)
    return app


def test_the_cron_reaper_cancels_a_runner_past_its_cap_whose_stop_never_ran(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    host.github.job = "wait"
    started = host.invoke(host.start_args("--max-minutes", "30"))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("connect", rental.runner_id)
    text = (host.tmp / "record.json").read_text()
    host.github.add_artifact(f"clore-runner-record-{rental.label}", {RECORD_FILE: text})
    host.github.add_artifact("coverage-report", {"index.html": "<p>not ours</p>"})
    host.github.add_artifact("clore-runner-record-broken", {RECORD_FILE: "{"})
    app = _reaper(host, monkeypatch)

    host.clock.unix = rental.cap_unix - 120  # within its cap: its job may be running
    early = CliRunner().invoke(app, ["cleanup", "--runners"])
    assert early.exit_code == 0, early.output
    assert "within its cap (2 min left)" in early.output and host.fake.live_orders()
    assert "skipped: artifact clore-runner-record-broken is not JSON" in early.output

    host.clock.unix = rental.cap_unix + 600
    late = CliRunner().invoke(app, ["cleanup", "--runners"])
    assert late.exit_code == 0, late.output
    assert f"order {rental.order_id}  cancelled" in late.output
    assert host.fake.live_orders() == []


def test_stop_leaves_alone_an_order_the_record_does_not_prove(host: Host) -> None:
    started = host.invoke(host.start_args())
    assert started.exit_code == 0, started.output
    record = json.loads((host.tmp / "record.json").read_text())
    host.github.wait_for("done", record["runners"][0]["runner_id"])
    forged = json.loads(json.dumps(record))
    forged["runners"][0]["created_unix"] -= 3600  # another order's time
    host.job_runs()
    result = host.invoke(["runner", "stop", "--record-json", json.dumps(forged)])
    assert result.exit_code == 0, result.output
    assert "not provably ours: left alone" in result.output and host.fake.live_orders()
    good = host.invoke(["runner", "stop", "--record-json", json.dumps(record)])
    assert good.exit_code == 0 and host.fake.live_orders() == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "the runner record is empty"),
        ("{", "the runner record is not JSON: line 1 column 2"),
        ('{"version": 1, "runners": [{"label": "x"}]}', "runners.0.runner_id: Field required"),
        ('{"version": 1, "runners": [], "api_key": "k"}', "api_key: Extra inputs"),
    ],
)
def test_a_bad_record_is_a_usage_error_naming_the_key(host: Host, text: str, words: str) -> None:
    result = host.invoke(["runner", "stop", "--record-json", text])
    assert result.exit_code == 2
    assert words in result.output
    assert host.fake.requests == []


def test_stop_needs_exactly_one_record(host: Host, tmp_path: Path) -> None:
    assert host.invoke(["runner", "stop"]).exit_code == 2
    missing = host.invoke(["runner", "stop", "--record", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "nope.json" in missing.output


def test_a_spot_runner_outbid_under_its_job_is_reported_and_cancelled_by_stop(
    host: Host,
) -> None:
    """Clore stops an outbid spot order's container (the runner dies with it, the job on it
    fails) and keeps the order listed, offline, until its bid wins again. `stop` says so and
    cancels it: no bid is raised, since the runner's one-time registration is spent."""
    from tests.gh_runner.harness import kill_runner

    host.github.job = "wait"  # the job is on the runner when the rival bid comes
    started = host.invoke(host.start_args("--spot"))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    assert rental.spot
    host.github.wait_for("connect", rental.runner_id)
    host.fake.outbid_now(rental.order_id)
    kill_runner(host.home / rental.label)  # what stopping its container does to it
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output
    words = " ".join(stopped.output.split())
    assert f"order {rental.order_id} on server {rental.server_id} was offline when stop came" in (
        words
    )
    assert "(spot: outbid, or its host down)" in words and "failed (re-run it)" in words
    assert host.fake.live_orders() == []
    assert [c.body["id"] for c in host.fake.calls("cancel_order")] == [rental.order_id]
    assert not host.fake.calls("set_spot_price")  # no bid raised to win it back
