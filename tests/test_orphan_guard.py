"""A test run killed mid-test leaves no server behind: its PostgreSQL cluster and its sshd
(with their sessions) are stopped by the fixtures' watchdog (tests/orphan_guard.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.orphan_guard import start_time
from tests.processes import LAUNCHES, marked_env, marked_pids

REPO = Path(__file__).resolve().parent.parent

_INNER = """
import json, os, sys
from pathlib import Path

def test_holds_servers(pg_cluster, sshd_killable):
    postmaster = int((pg_cluster.data / "postmaster.pid").read_text().split()[0])
    facts = {"postmaster": postmaster, "pg_folder": str(pg_cluster.folder),
             "sshd": sshd_killable.process.pid}
    done = Path(os.environ["FACTS"])
    done.with_suffix(".tmp").write_text(json.dumps(facts))
    done.with_suffix(".tmp").rename(done)
    sys.stdin.read()  # until killed
"""


@pytest.mark.slow
def test_a_killed_test_run_leaves_no_cluster_and_no_sshd(tmp_path: Path) -> None:
    inner = tmp_path / "test_inner.py"
    inner.write_text(_INNER)
    facts_file = tmp_path / "facts.json"
    env = marked_env({"FACTS": str(facts_file), "PYTHONPATH": str(REPO)})
    command = [
        sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
        "-p", "tests.pg_fixture", "-p", "tests.sshd_fixture", str(inner),
    ]  # fmt: skip
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        facts = _wait_for_facts(facts_file, run)
        servers = {pid: start_time(pid) for pid in (int(facts["postmaster"]), int(facts["sshd"]))}
        assert all(servers.values()), "the servers run while the test does"
        os.killpg(run.pid, signal.SIGKILL)  # the whole run, as a CI timeout kills it
        run.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            any(start_time(pid) == began for pid, began in servers.items())
            or Path(str(facts["pg_folder"])).exists()
            or marked_pids(LAUNCHES.token)  # the watchdogs too, once their work is done
        ):
            time.sleep(0.05)  # polling for other processes' exits; there is no event to wait on
        alive = [pid for pid, began in servers.items() if start_time(pid) == began]
        assert alive == [], f"left running: {alive}"
        assert not Path(str(facts["pg_folder"])).exists()
        assert marked_pids(LAUNCHES.token) == []  # nothing the run started stays behind
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=10)


def _wait_for_facts(path: Path, run: subprocess.Popen[bytes]) -> dict[str, int | str]:
    deadline = time.monotonic() + 120
    while not path.exists():
        if run.poll() is not None or time.monotonic() > deadline:
            output = run.stdout.read().decode(errors="replace") if run.stdout else ""
            raise AssertionError(f"the inner run did not start its servers:\n{output[-3000:]}")
        time.sleep(0.05)  # polling a file another process writes
    facts: dict[str, int | str] = json.loads(path.read_text())
    return facts
