"""The action's runner steps end to end: action.yml's steps with `mode: runner-start`, then
`mode: runner-stop` on another machine, each run as the runner runs a composite step (its
`env:` interpolated, its script by `bash -eo pipefail`, entrypoint.sh, `exec clore-run`), against
the fake Clore with its orders on the real sshd and the fake GitHub with its stand-in runner.

`clore-run` in the action's venv is tests/gh_runner/entry.py: the real CLI with the market's pace
shortened and the stand-in package in place of the pinned release. The fake Clore keeps real
time here (a step is a process of its own: its orders must boot while it polls).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import API_KEY, FakeOrder
from tests.fakes.github_runners import ADMIN_TOKEN
from tests.fakes.github_runners import REPO as REPO_NAME
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.entry import PACKAGE_ENV
from tests.gh_runner.harness import Host, scan_for
from tests.gh_runner.harness import host as host
from tests.gha import condition
from tests.test_action import REPO, Job, step_named

RUN_STEP, RELEASE_STEP, UPLOAD_STEP = (
    "Run the pipeline",
    "Release rented servers",
    "Upload the runner record",
)


class WallClock:
    """The fake Clore on real time (its `ct` and `Date` near the step's own clock), which a
    test can still move on (`advance`: the user's job)."""

    def __init__(self) -> None:
        self._ahead_s = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return time.monotonic() + self._ahead_s

    def time(self) -> float:
        with self._lock:
            return time.time() + self._ahead_s

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ahead_s += seconds


@pytest.fixture
def fake_clock() -> WallClock:
    return WallClock()


@pytest.fixture
def machines(host: Host, tmp_path: Path) -> tuple[Job, Job]:
    """The start job's machine and the stop job's: each a RUNNER_TEMP of its own."""
    fake = host.fake
    fake.enforce_rate_limits = False  # the steps' client is paced for the fake, not the API
    fake.appear_after_s, fake.online_after_s = 0.1, 0.5
    fake.after_create = lambda order: _authorize(host, order)
    env = {
        "CLORE_API_URL": fake.url,
        "GITHUB_API_URL": host.github.url,
        "GITHUB_REPOSITORY": REPO_NAME,
        PACKAGE_ENV: f"{host.github.package_url} {host.github.package_sha256}",
    }
    return _machine(tmp_path / "start", env), _machine(tmp_path / "stop", env)


def _authorize(host: Host, order: FakeOrder) -> None:
    assert order.ssh_key, "the create sent no key"
    host.sshd.authorize(order.ssh_key)  # what Clore does with `ssh_key`


def _machine(root: Path, env: dict[str, str]) -> Job:
    job = Job(root, extra_env=env)
    cli = job.temp / "clore-run-venv" / "bin" / "clore-run"
    cli.unlink()
    cli.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m tests.gh_runner.entry "$@"\n'
    )
    cli.chmod(0o755)
    return job


START_INPUTS = {
    "mode": "runner-start",
    "api-key": API_KEY,
    "runner-token": ADMIN_TOKEN,
    "gpu": "3090",
    "currency": "USD-Blockchain",
    "max-minutes": "30",
}


def _context(job: Job, inputs: dict[str, str], outcome: str) -> dict[str, Any]:
    ctx = job.context(inputs)
    ctx["steps"].setdefault("run", {"outputs": {}})["outcome"] = outcome
    return ctx


def test_runner_start_then_runner_stop_through_the_actions_steps(
    host: Host, machines: tuple[Job, Job]
) -> None:
    start, stop = machines
    began = time.monotonic()
    started = start.run(RUN_STEP, START_INPUTS, capture_output=True)
    out = started.stdout.decode() + started.stderr.decode()
    assert started.returncode == 0, out
    outputs = start.outputs["run"]
    record = json.loads(outputs["record"])
    (rental,) = record["runners"]
    host.labels[rental["order_id"]] = rental["label"]
    assert outputs["label"] == rental["label"] and json.loads(outputs["labels"]) == [
        rental["label"]
    ]
    assert f"label: {rental['label']}" in out
    # The record goes up as an artifact (the reaper's), from the file the step names.
    ctx = _context(start, START_INPUTS, "success")
    assert condition(step_named(UPLOAD_STEP).get("if"), ctx, "success")
    assert json.loads(Path(outputs["record-path"]).read_text()) == record
    # A start that succeeded leaves its servers to the runners: no release step.
    assert not condition(step_named(RELEASE_STEP).get("if"), ctx, "success")
    with SqliteLedger(start.temp / "clore-run" / "ledger.db") as ledger:
        (row,) = ledger.rentals(rental["run_id"])
    assert row.order_id == rental["order_id"] and row.state == "running"
    assert (start.temp / "clore-run" / "hosts.db").exists()  # the boot was remembered

    online = host.github.wait_for("connect", rental["runner_id"])
    host.github.wait_for("done", rental["runner_id"])  # the user's job ran on it
    (order,) = host.fake.orders.values()
    assert order.live

    stop_inputs = {
        "mode": "runner-stop",
        "api-key": API_KEY,
        "runner-token": ADMIN_TOKEN,
        "runner-record": outputs["record"],
    }
    host.clock.advance(120.0)  # the user's job took two minutes
    asked = time.monotonic()
    stopped = stop.run(RUN_STEP, stop_inputs, capture_output=True)
    stop_out = stopped.stdout.decode() + stopped.stderr.decode()
    assert stopped.returncode == 0, stop_out
    assert not order.live and host.fake.live_orders() == []
    assert "gone: it ran its job and removed itself" in stop_out
    assert float(stop.outputs["run"]["cost-usd"]) > 0
    assert "### GPU runners" in stop.summaries["run"]
    ctx = _context(stop, stop_inputs, "success")
    assert condition(step_named(RELEASE_STEP).get("if"), ctx, "success")  # always, for a stop
    released = stop.run(RELEASE_STEP, stop_inputs, capture_output=True)
    assert released.returncode == 0
    assert "nothing to release" in released.stdout.decode()  # this machine rented nothing

    config = host.github.issued[rental["runner_id"]]
    texts = [out, stop_out, json.dumps(start.outputs), json.dumps(stop.outputs)]
    texts += [*start.summaries.values(), *stop.summaries.values()]
    assert scan_for(config, [start.root, stop.root], texts) == []
    print(
        f"\naction figures: start step to runner online {online - began:.2f} s, "
        f"stop step to order cancelled {host.ended[order.id] - asked:.2f} s"
    )


def test_a_start_step_cancelled_mid_boot_gives_everything_back(
    host: Host, machines: tuple[Job, Job]
) -> None:
    """The runner's cancel: SIGINT to the step (clore-run itself, through the `exec`s) while
    the server boots; it exits 130 with the order cancelled and the registration removed, and
    the release step, which runs after a start that did not succeed, finds nothing left."""
    start, _ = machines
    created = threading.Event()
    host.fake.online_after_s = 30.0  # it is still booting when the cancel comes
    authorize = host.fake.after_create
    assert authorize is not None

    def on_create(order: FakeOrder) -> None:
        authorize(order)
        created.set()

    host.fake.after_create = on_create
    proc = start.start(RUN_STEP, START_INPUTS)
    try:
        assert created.wait(60.0), "nothing was rented"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    assert code == 130, out
    assert "Traceback" not in out
    assert host.fake.live_orders() == []
    assert host.github.runners == {} and len(host.github.removed) == 1
    start.collect("run")
    ctx = _context(start, START_INPUTS, "failure")
    assert condition(step_named(RELEASE_STEP).get("if"), ctx, "cancelled")
    released = start.run(RELEASE_STEP, START_INPUTS, capture_output=True)
    said = released.stdout.decode() + released.stderr.decode()
    assert released.returncode == 0, said
    with SqliteLedger(start.temp / "clore-run" / "ledger.db") as ledger:
        assert ledger.unreleased() == []
