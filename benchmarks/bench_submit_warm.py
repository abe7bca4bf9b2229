"""CI through `serve`, cold against warm: `clore-run submit --wait --logs` as a CI job runs it.

    python -m benchmarks.bench_submit_warm [--quick]

A queue server (in this process, uvicorn on loopback) on the clore backend against the fake
Clore API, its orders on a real sshd, a server online 30 s after its order (the fake's boot;
`--quick`: 3 s), real time, `--keep-warm 15`. `clore-run submit` is a real process. Prints, for
the first submission (cold: a rental and its boot) and the next (warm: the server the first
left): seconds from starting `submit --wait` to the job's first output line and to its exit,
the ratio warm/cold, and serve's own overhead on the warm one (from the server's reply to the
submission to the first line and to exit; before it, the CLI's own start). Then the orders the
fake took for 10 submissions in a row (`--quick`: 3): 1 is the goal. Loopback only.
`BENCH_TRACE=1` prints each line `submit` wrote with its second; `BENCH_POLL="--poll 0.1"`
passes its (hidden) poll interval.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer

from benchmarks.fake_market import fake_market
from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.fast_clock import FastClock
from tests.serve.harness import TOKEN, thread_server
from tests.sshd_fixture import start_sshd

JOB = "jobs:\n  probe:\n    run: echo first-line; echo done\n"
FIRST_LINE = "[probe] first-line"
POLL = os.environ.get("BENCH_POLL", "").split()


def submit_once(url: str, folder: Path, number: int) -> dict[str, Any]:
    """One `clore-run submit --wait --logs`: seconds to the job's first line and to exit."""
    pipeline = folder / f"p{number}.yml"
    pipeline.write_text(JOB)
    env = {**os.environ, "CLORE_RUN_TOKEN": TOKEN, "GITHUB_ACTIONS": ""}
    args = ["submit", str(pipeline), "--server", url, "--wait", "--logs", *POLL]
    out = folder / f"out{number}"
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    first = submitted = None
    for line in proc.stdout:
        if submitted is None and line.startswith("submitted "):
            submitted = time.monotonic() - began
        if os.environ.get("BENCH_TRACE"):
            print(f"    {time.monotonic() - began:6.2f} {line.rstrip()}")
        if first is None and line.startswith(FIRST_LINE):
            first = time.monotonic() - began
    code = proc.wait()
    ended = time.monotonic() - began
    assert code == 0, f"submit exited {code}"
    (job,) = json.loads((out / "summary.json").read_text())["jobs"]
    return {
        "first_line_s": first if first is not None else ended,
        "exit_s": ended,
        "submitted_s": submitted if submitted is not None else 0.0,
        "warm": job["warm_server"],
        "server_wait_s": job["server_wait_s"],
    }


def process_start_s() -> float:
    """A bare `clore-run --version`: the part of every exit that is the process itself."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "runner", "--version"], check=True, capture_output=True)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="for CI: a 3 s boot, 3 in a row")
    quick = parser.parse_args().quick
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as name, HTTPServer() as http:
        tmp = Path(name)
        sshd = start_sshd(tmp / "sshd")
        try:
            measure(tmp, http, sshd, boot_s=3.0 if quick else 30.0, in_a_row=3 if quick else 10)
        finally:
            sshd.stop()


def measure(tmp: Path, http: HTTPServer, sshd: Any, boot_s: float, in_a_row: int) -> None:
    clock = FastClock(speed=1.0)  # real time: the figures are a CI job's seconds
    fake = fake_market(http, clock, sshd.port)
    fake.online_after_s = boot_s
    setup = Setup(fake, clock, sshd, tmp)  # type: ignore[arg-type]
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=1), "bench")
    keep = WarmPolicy(keep_warm_s=900.0)
    with thread_server(tmp, capacity=1, clock=clock, backend=backend, warmth=keep) as srv:
        runs = [submit_once(srv.api.url, tmp, n) for n in range(in_a_row)]
    cold, warm = runs[0], runs[1]
    start = process_start_s()
    print(f"fake Clore, boot {boot_s:g} s after the order, keep-warm 15 min, real time")
    for label, r in (("cold", cold), ("warm", warm)):
        print(
            f"  {label}: first output line {r['first_line_s']:6.2f} s, exit {r['exit_s']:6.2f} s"
            f"  (warm_server {str(r['warm']).lower()}, server_wait_s {r['server_wait_s']:.2f})"
        )
    print(
        f"  warm/cold: first line {warm['first_line_s'] / cold['first_line_s']:.3f}x, "
        f"exit {warm['exit_s'] / cold['exit_s']:.3f}x (goal <= 0.1x)"
    )
    queued = warm["submitted_s"]
    print(
        f"  warm, from the server's reply to the submission: first line "
        f"{warm['first_line_s'] - queued:.2f} s, exit {warm['exit_s'] - queued:.2f} s "
        f"(serve's own overhead, goal <= 2 s); before it, the CLI's start and the POST "
        f"{queued:.2f} s (a bare `clore-run --version`: {start:.2f} s)"
    )
    warm_runs = sum(1 for r in runs if r["warm"])
    print(
        f"  {in_a_row} submissions in a row: {len(fake.orders)} order(s) (goal 1), "
        f"{warm_runs} on a warm server"
    )
    assert not fake.violations, fake.violations
    ledger.close()


if __name__ == "__main__":
    main()
