"""Ctrl-C and SIGTERM: jobs killed, reports written, exit 130, well within GitHub's 7.5 s."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive, default_signals, marked_env

PIPELINE = """\
jobs:
  long:
    workspace: false
    run: |
      sleep 300 &
      echo $! > {pidfile}
      echo ready
      wait
  after: {{needs: long, run: echo never, workspace: false}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_cancels_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    pidfile = tmp_path / "child.pid"
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(PIPELINE.format(pidfile=pidfile))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "runner", "run", str(pipeline), "--backend", "local"]
    with subprocess.Popen(
        [*command, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=marked_env(),
        preexec_fn=default_signals,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks until the job has really started
            if b"[long] ready" in line:
                break
        sent = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=15)
        took = time.monotonic() - sent
        rest = proc.stdout.read().decode()
    assert code == 130, rest
    assert took < 7.0
    assert "Traceback" not in rest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert {j["id"]: j["status"] for j in summary["jobs"]} == {
        "long": "cancelled",
        "after": "cancelled",
    }
    child = int(pidfile.read_text())
    assert not alive(child)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_starting_up_exits_130_without_a_traceback(sig: signal.Signals) -> None:
    """Before any command takes the signals over (imports, the process guard): one line and
    130, as CI expects of an interrupted step, not a traceback or a bare -15."""
    code = (
        "import os, signal, sys\n"
        "import runner.launch as launch\n"
        f"launch.protect = lambda **kw: os.kill(os.getpid(), {int(sig)})\n"
        "sys.argv = ['clore-run', '--version']\n"
        "launch.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=marked_env(),
        timeout=60,
        preexec_fn=default_signals,
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert "clore-run: interrupted" in done.stderr
