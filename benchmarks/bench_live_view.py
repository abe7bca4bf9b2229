"""What drawing the live view costs: `clore-run run` of 50 jobs running at once, on a
pseudo-terminal (the live table redrawn 4 times a second, output streaming above it) against
the same run with plain lines into a pipe, in one run of this script.

    python -m benchmarks.bench_live_view [--quick]

Prints the CPU time of the clore-run process (user + system, its jobs not counted) over the
run's wall time, for both, and the difference: the drawing's share of one core.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pipeline(jobs: int, seconds: float) -> str:
    body = "".join(
        f"  j{i:02d}:\n    run: |\n"
        f"      for k in $(seq 1 {int(seconds * 2)}); do echo step $k; sleep 0.5; done\n"
        for i in range(jobs)
    )
    return f"name: bench\nconcurrency: {jobs}\ndefaults:\n  workspace: false\njobs:\n{body}"


def run_once(path: Path, out: Path, on_tty: bool) -> tuple[float, float]:
    """(wall s, CPU s of the clore-run process itself)."""
    cmd = [sys.executable, "-m", "runner", "run", str(path), "--out", str(out)]
    env = {**os.environ, "COLUMNS": "120", "LINES": "40"}
    env.pop("GITHUB_ACTIONS", None)
    began = time.perf_counter()
    if on_tty:
        pid, fd = pty.fork()
        if pid == 0:
            os.execvpe(cmd[0], cmd, env)
        while True:  # read the screen as a terminal would, or the child blocks on a full pty
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                try:
                    if not os.read(fd, 65536):
                        break
                except OSError:
                    break
        _, status, usage = os.wait4(pid, 0)
    else:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    assert os.waitstatus_to_exitcode(status) == 0, "the benchmark run failed"
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10 jobs of 3 s instead of 50 of 20 s")
    args = parser.parse_args()
    jobs, seconds = (10, 3.0) if args.quick else (50, 20.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yml"
        path.write_text(pipeline(jobs, seconds))
        plain_wall, plain_cpu = run_once(path, Path(tmp) / "plain", on_tty=False)
        live_wall, live_cpu = run_once(path, Path(tmp) / "live", on_tty=True)
    print(f"{jobs} jobs of {seconds:g} s at once, each printing a line every 0.5 s")
    for label, wall, cpu in (
        ("plain lines (pipe)", plain_wall, plain_cpu),
        ("live view (pty)", live_wall, live_cpu),
    ):
        print(f"{label:19s} {cpu:.2f} s CPU over {wall:.1f} s = {100 * cpu / wall:.1f}% of a core")
    extra = live_cpu - plain_cpu
    ratio = live_cpu / max(plain_cpu, 1e-9)
    print(
        f"drawing: {extra:+.2f} s CPU = {100 * extra / live_wall:+.1f}% of a core; "
        f"live/plain {ratio:.2f}x"
    )


if __name__ == "__main__":
    main()
