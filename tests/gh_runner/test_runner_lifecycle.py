"""`clore-run runner start|stop` end to end: the fake Clore with its orders on a real sshd, the
fake GitHub, and the stand-in runner package installed by the real install path."""

from __future__ import annotations

import json
import time

from tests.fakes.clore_on_sshd import fake_cost_usd
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import (
    Host,
    actions_env,
    outputs_file,
    runner_pid,
    scan_for,
    wait_exit,
)
from tests.gh_runner.harness import host as host

FIGURES: dict[str, float] = {}


def test_happy_path_registers_runs_one_job_and_stop_cancels_what_it_cost(host: Host) -> None:
    env = actions_env(host)
    t0 = time.monotonic()
    started = host.invoke(host.start_args("--max-minutes", "30"), env)
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    registered = host.github.wait_for("registered", rental.runner_id)
    online = host.github.wait_for("connect", rental.runner_id)
    done = host.github.wait_for("done", rental.runner_id)
    out = outputs_file(host.tmp / "github_output")
    assert out["label"] == rental.label and out["record"] == host.record().to_json()
    assert f"label: {rental.label}" in started.output
    started_summary = (host.tmp / "github_step_summary").read_text()
    assert (
        "### GPU runners: started" in started_summary and f"#{rental.server_id}" in started_summary
    )
    (order,) = host.fake.orders.values()
    assert order.id == rental.order_id and order.live  # the job ran; billing goes on

    host.job_runs()
    t1 = time.monotonic()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")], env)
    assert stopped.exit_code == 0, stopped.output
    assert not order.live and host.ended[order.id] >= done
    assert "gone: it ran its job and removed itself" in stopped.output
    billed_usd = fake_cost_usd(host.fake)
    assert outputs_file(host.tmp / "github_output")["cost-usd"] == f"{billed_usd:.4f}"
    summary = (host.tmp / "github_step_summary").read_text()
    assert "### GPU runners" in summary and rental.label in summary
    # Wall time on this machine; the server's boot (the fake's 30 s to online) is fake time.
    FIGURES["start_to_jit_registered_s"] = registered - t0
    FIGURES["start_to_runner_online_s"] = online - t0
    FIGURES["stop_to_order_cancelled_s"] = host.ended[order.id] - t1
    print(f"\nfigures: {FIGURES}")


def test_a_runner_that_never_picks_a_job_is_deregistered_and_its_server_cancelled(
    host: Host,
) -> None:
    host.github.job = "wait"  # the runner comes online; no job is ever routed to it
    started = host.invoke(host.start_args())
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("connect", rental.runner_id)
    pid = runner_pid(host.home / rental.label)
    assert pid is not None
    config = host.github.runners[rental.runner_id].config
    # While it runs: the config is in no process's arguments and no file we wrote.
    assert scan_for(config, [host.tmp, host.home / rental.label], host.outputs) == []

    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output
    assert "removed: it never took a job (online)" in stopped.output
    assert host.github.removed == [rental.runner_id] and host.github.runners == {}
    assert host.fake.live_orders() == []
    assert wait_exit(pid, 10.0)  # cancelling the order stopped its container: the runner too
    assert scan_for(config, [host.tmp, host.home / rental.label], host.outputs) == []


def test_two_runners_for_a_matrix_each_on_its_own_server(host: Host) -> None:
    env = actions_env(host)
    args = host.start_args("--runners", "2", "--gpu", "RTX")
    args[args.index("USD-Blockchain")] = "CLORE-Blockchain"
    started = host.invoke(args, env)
    assert started.exit_code == 0, started.output
    record = host.record()
    assert len(record.runners) == 2 and len({r.server_id for r in record.runners}) == 2
    out = outputs_file(host.tmp / "github_output")
    assert json.loads(out["labels"]) == record.labels and out["label"] == record.labels[0]
    for rental in record.runners:
        host.github.wait_for("done", rental.runner_id)
        assert host.github.did("connect", rental.runner_id)
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record-json", out["record"]], env)
    assert stopped.exit_code == 0, stopped.output
    assert host.fake.live_orders() == [] and len(host.fake.orders) == 2
    total = outputs_file(host.tmp / "github_output")["cost-usd"]
    assert total == f"{fake_cost_usd(host.fake):.4f}"
