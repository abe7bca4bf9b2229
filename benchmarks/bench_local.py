"""Local backend overhead: 200 jobs running `true` at cap 8, against `xargs -P 8` in the same run.

    python -m benchmarks.bench_local [--jobs 200] [--cap 8] [--repeat 5] [--scratch DIR]
    python -m benchmarks.bench_local --quick    # 20 jobs, once

Prints the best wall time of each and the ratio against xargs, and the CPU time (the process's
and its children's) against xargs': on a shared machine the CPU ratio moves less with the load.
In-process, the engine (workdirs, processes, logs, scheduling; target <= 1.5x) and then
writing the reports; and `clore-run run --backend local` as a whole process, as a user runs it,
start-up and reports included (no target: design §8 retired it, as it measured nothing a user
waits for). xargs runs each job as the local backend does:
`bash -eo pipefail -c`.

Every run's folders are kept until the benchmark ends: on a file system like this machine's root
(ext4 without a journal), creating a file skips the inodes deleted there in the last minute or so,
one by one, so a repetition that removed its 200 logs made the next one's log files cost up to
0.4 ms each to create (a tenth of the engine's CPU). A user's run into a fresh `--out` does not
pay for files a previous benchmark round just deleted. For the same reason they go in the
current directory, as a user's `clore-run-results/` does, not in /tmp: there every test suite
on the machine creates and deletes thousands of files, and a new file was seen costing 0.9 ms
(23 us in a folder of the checkout at the same moment). `--scratch /tmp` measures that case.
"""

from __future__ import annotations

import argparse
import io
import resource
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.targets import verdict
from benchmarks.whole_process import clore_run, timed
from runner.backends.local import LocalBackend
from runner.engine.console import Console
from runner.engine.pipeline_run import PipelineRun, RunSettings
from runner.report import write_reports
from runner.spec.loader import parse_pipeline

Timing = tuple[float, float]  # (wall, CPU) seconds

TARGET_RATIO = 1.5  # the engine against `xargs -P cap` (design §8)
XARGS = ["xargs", "-P", "{cap}", "-I{}", "bash", "--noprofile", "--norc", "-eo", "pipefail"]


def xargs_time(jobs: int, cap: int) -> tuple[float, float]:
    argv = [a.replace("{cap}", str(cap)) for a in XARGS]
    return timed([*argv, "-c", "{}"], stdin=("true\n" * jobs).encode())


def pipeline_text(jobs: int, cap: int) -> str:
    return f"concurrency: {cap}\njobs:\n" + "".join(
        f"  j{i}: {{run: 'true', workspace: false}}\n" for i in range(jobs)
    )


def clore_run_time(jobs: int, cap: int, scratch: Path) -> tuple[float, float, float]:
    """(seconds running the jobs through the engine, its CPU seconds with the jobs', seconds
    writing the reports). Its folders stay under `scratch`."""
    pipeline = parse_pipeline(pipeline_text(jobs, cap), "bench.yml", {})
    out = Path(tempfile.mkdtemp(dir=scratch)) / "out"
    console = Console(io.StringIO())
    engine = PipelineRun(pipeline, LocalBackend(), RunSettings(out, cap), console)
    cpu = _cpu_s()
    start = time.perf_counter()
    record = engine.run()
    ran = time.perf_counter() - start
    cpu = _cpu_s() - cpu
    start = time.perf_counter()
    write_reports(out, record)
    reported = time.perf_counter() - start
    assert all(r.status.value == "passed" for r in record.results)
    return ran, cpu, reported


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def whole_process_time(jobs: int, cap: int, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `clore-run run bench.yml --backend local --out OUT`, output to a
    pipe. Its folder stays under `scratch`."""
    cli = clore_run()
    tmp = tempfile.mkdtemp(dir=scratch)
    (Path(tmp) / "bench.yml").write_text(pipeline_text(jobs, cap))
    return timed([*cli, "run", "bench.yml", "--backend", "local", "--out", "out"], cwd=tmp)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    parser.add_argument(
        "--scratch", type=Path, default=Path.cwd(), help="where the runs' folders go (made anew)"
    )
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.repeat = 20, 1
    scratch = Path(tempfile.mkdtemp(prefix=".bench-local-", dir=args.scratch))
    try:
        _report(args, *_measure(args.jobs, args.cap, args.repeat, scratch))
    finally:
        shutil.rmtree(scratch)


def _measure(
    jobs: int, cap: int, repeat: int, scratch: Path
) -> tuple[list[Timing], list[tuple[float, float, float]], list[Timing]]:
    """xargs, the engine in process and the whole process, interleaved: on a shared machine
    a burst of other load then hits all three."""
    whole_process_time(jobs, cap, scratch)  # fills the bytecode cache
    bases, runs, wholes = [], [], []
    for _ in range(repeat):
        bases.append(xargs_time(jobs, cap))
        runs.append(clore_run_time(jobs, cap, scratch))
        wholes.append(whole_process_time(jobs, cap, scratch))
    return bases, runs, wholes


def _report(
    args: argparse.Namespace,
    bases: list[Timing],
    runs: list[tuple[float, float, float]],
    wholes: list[Timing],
) -> None:
    whole, whole_cpu = min(w[0] for w in wholes), min(w[1] for w in wholes)
    base, base_cpu = min(b[0] for b in bases), min(b[1] for b in bases)
    ran, ran_cpu = min(r[0] for r in runs), min(r[1] for r in runs)
    reported = min(r[2] for r in runs)
    print(f"{args.jobs} `true` jobs at cap {args.cap} (best of {args.repeat}):")
    print(f"  xargs -P {args.cap}:                 {base:.3f} s  (CPU {base_cpu:.3f} s)")
    print(
        f"  clore-run engine, local backend: {ran:.3f} s  ratio {ran / base:.2f}x"
        f" (target <= {TARGET_RATIO}x);"
        f" CPU {ran_cpu:.3f} s, {ran_cpu / base_cpu:.2f}x xargs"
    )
    print(
        f"  + writing junit/summary reports: {reported:.3f} s  ratio with reports "
        f"{(ran + reported) / base:.2f}x"
    )
    print(
        f"  `clore-run run --backend local`, whole process: {whole:.3f} s  "
        f"ratio {whole / base:.2f}x (no target); CPU {whole_cpu:.3f} s, "
        f"{whole_cpu / base_cpu:.2f}x xargs"
    )
    slow = ran > TARGET_RATIO * base
    missed = [f"engine {ran / base:.2f}x xargs > {TARGET_RATIO}x"] if slow else []
    verdict(missed, quick=args.quick)


if __name__ == "__main__":
    main()
