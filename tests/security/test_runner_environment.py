"""The JIT config stays out of the environment of the processes that live as long as the
runner (setsid, runuser, timeout): /proc/PID/environ keeps a process's first environment for
its life, readable by its user, which is the user a job's steps run as. Only the runner's own
process gets it (the runner reads it from there; an argument would be readable by anyone), and
it is spent at the runner's first connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host, runner_pid
from tests.gh_runner.harness import host as host


@pytest.mark.slow
def test_the_long_lived_parents_of_the_runner_do_not_hold_the_config(host: Host) -> None:
    host.github.job = "wait"  # the runner stays, as it does while a job runs
    started = host.invoke(host.start_args())
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("connect", rental.runner_id)
    config = host.github.issued[rental.runner_id].encode()
    pid = runner_pid(host.home / rental.label)
    assert pid is not None
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    assert command.endswith(b"timeout"), command  # the process that lives until the cap
    assert config not in environ
    assert not (host.home / rental.label / "runner" / ".jitconfig").exists()  # read, removed
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output


@pytest.mark.slow
def test_stop_does_not_follow_a_records_scope_to_another_repository(host: Host) -> None:
    """The record is pasted text: its `scope` must not aim the runner token (which may
    administer other repositories) anywhere but the repository this stop runs for."""
    import json  # only this test edits a record

    started = host.invoke(host.start_args())
    assert started.exit_code == 0, started.output
    record = json.loads((host.tmp / "record.json").read_text())
    host.github.wait_for("done", record["runners"][0]["runner_id"])
    record["runners"][0]["scope"] = "repos/victim/secret"
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record-json", json.dumps(record)])
    assert stopped.exit_code == 0, stopped.output
    assert not [p for _, p in host.github.seen if "/victim/" in p]
    assert "not touched: the record names repos/victim/secret" in " ".join(stopped.output.split())
    assert host.fake.live_orders() == []  # the order is ours by proof: cancelled all the same
