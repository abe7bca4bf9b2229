"""The scheduling core on a fake clock, against the lower bound and a naive poller.

    python benchmarks/bench_scheduler.py [--seeds 10] [--sizes 100 1000 10000] [--caps 3 10 50]
    python benchmarks/bench_scheduler.py --quick    # seconds: 2 DAGs of 100 and 1,000 jobs

Random DAGs (file order is a topological order; each job needs 0-3 jobs among the 100 before
it; durations uniform in 10 s .. 10 min, known to the scheduler as `estimate-minutes`; equal
priorities). For each size and cap, over the DAGs, it reports:

- the CPU time of `simulate()` (time.process_time: building the scheduler, ranks, the whole run),
  the largest over the DAGs (target for 10,000 jobs: under 1 s);
- makespan / max(critical path, total work / cap), the lower bound no schedule beats, mean and
  worst (target: within 1%, a ratio <= 1.01);
- the same ratio for a naive poller (every 10 s of simulated time, look at the top-priority
  pending job, start it if its needs are done and a slot is free, else do nothing: at most
  one start per poll).

Then the case a naive poller cannot get past: a high-priority job that needs a low-priority one.
Not a pytest test: figures are reported, not asserted.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from runner.core import graph
from runner.core.model import FailureKind, Job, JobStatus, Priority, RunStatus
from runner.core.simulate import simulate

POLL_S = 10.0


@dataclass
class Dag:
    jobs: list[Job]
    duration: dict[str, float]

    @property
    def work(self) -> float:
        return sum(self.duration.values())

    @cached_property
    def critical_path(self) -> float:
        needs = {j.id: j.needs for j in self.jobs}
        return graph.critical_path(needs, self.duration.__getitem__)[1]

    def bound(self, cap: int) -> float:
        return max(self.critical_path, self.work / cap)


def random_dag(n: int, seed: int, window: int = 100, max_needs: int = 3) -> Dag:
    rng = random.Random(seed)
    jobs: list[Job] = []
    duration: dict[str, float] = {}
    for i in range(n):
        lo = max(0, i - window)
        k = min(i - lo, rng.randint(0, max_needs))
        needs = tuple(f"j{d}" for d in sorted(rng.sample(range(lo, i), k)))
        seconds = float(rng.randint(10, 600))
        jobs.append(
            Job(id=f"j{i}", name=f"j{i}", run="true", index=i, needs=needs, estimate_s=seconds)
        )
        duration[f"j{i}"] = seconds
    return Dag(jobs, duration)


# -- ours ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ours:
    cpu_s: float
    makespan_s: float
    max_running: int
    all_passed: bool


def run_ours(dag: Dag, cap: int) -> Ours:
    def outcome(job_id: str, _attempt: int) -> tuple[float, FailureKind | None]:
        return dag.duration[job_id], None

    t0 = time.process_time()
    sim = simulate(dag.jobs, cap, outcome)
    cpu = time.process_time() - t0
    passed = len(sim.results) == len(dag.jobs) and all(
        r.status is JobStatus.PASSED for r in sim.results
    )
    return Ours(cpu, sim.makespan_s, sim.max_running, passed)


# -- the naive poller ------------------------------------------------------------------------


def run_naive(jobs: Sequence[Job], duration: dict[str, float], cap: int) -> float | None:
    """Makespan of the naive poller, or None when it deadlocks.

    Every POLL_S: collect the jobs that finished; then take the top pending job (priority, then
    file order); if its needs are done and a slot is free, start it; otherwise start nothing.
    It deadlocks when nothing runs and the top pending job still has unmet needs: from then on
    no poll can change anything.
    """
    pending = sorted(jobs, key=lambda j: (-int(j.priority), j.index))
    done: set[str] = set()
    running: dict[str, float] = {}  # job -> end time
    top = 0
    now = 0.0
    while top < len(pending) or running:
        for job_id, end in list(running.items()):
            if end <= now:
                del running[job_id]
                done.add(job_id)
        if top < len(pending):
            job = pending[top]
            if all(n in done for n in job.needs):
                if len(running) < cap:
                    running[job.id] = now + duration[job.id]
                    top += 1
            elif not running:
                return None  # deadlock
        if top == len(pending) and running:
            return max(running.values())  # nothing left to start: the last finish ends the run
        now += POLL_S
    return now


# -- report ----------------------------------------------------------------------------------


def fmt_ratio(value: float | None) -> str:
    return "deadlock" if value is None else f"{value:.4f}"


def table(sizes: Sequence[int], caps: Sequence[int], seeds: Sequence[int]) -> bool:
    header = (
        f"{'jobs':>6} {'cap':>4} {'CPU s max':>9} {'ratio mean':>10} {'ratio worst':>11} "
        f"{'bound':>6} {'max run':>7} {'naive mean':>10} {'naive worst':>11}"
    )
    print(header)
    print("-" * len(header))
    ok = True
    for n in sizes:
        dags = [random_dag(n, seed * 100_003 + n) for seed in seeds]
        for cap in caps:
            cpu: list[float] = []
            ratios: list[float] = []
            naive: list[float | None] = []
            binding: list[str] = []
            peak = 0
            for dag in dags:
                ours = run_ours(dag, cap)
                bound = dag.bound(cap)
                ok &= ours.all_passed and ours.max_running <= cap
                cpu.append(ours.cpu_s)
                ratios.append(ours.makespan_s / bound)
                peak = max(peak, ours.max_running)
                span = run_naive(dag.jobs, dag.duration, cap)
                naive.append(None if span is None else span / bound)
                binding.append("path" if dag.critical_path >= dag.work / cap else "work")
            worst = max(range(len(dags)), key=ratios.__getitem__)
            finite = [r for r in naive if r is not None]
            naive_mean = sum(finite) / len(finite) if len(finite) == len(naive) else None
            naive_worst = max(finite) if len(finite) == len(naive) else None
            print(
                f"{n:>6} {cap:>4} {max(cpu):>9.3f} {sum(ratios) / len(ratios):>10.4f} "
                f"{ratios[worst]:>11.4f} {binding[worst]:>6} {peak:>7} "
                f"{fmt_ratio(naive_mean):>10} {fmt_ratio(naive_worst):>11}"
            )
    return ok


def inversion_case() -> bool:
    """A high-priority deploy needs a low-priority build: the naive poller waits on deploy."""
    jobs = [
        Job(id="deploy", name="deploy", run="true", index=0, needs=("build",), estimate_s=60.0,
            priority=Priority.URGENT),
        Job(id="build", name="build", run="true", index=1, estimate_s=300.0,
            priority=Priority.LOW),
        Job(id="docs", name="docs", run="true", index=2, estimate_s=120.0),
    ]  # fmt: skip
    duration = {j.id: j.estimate_s or 0.0 for j in jobs}

    def outcome(job_id: str, _attempt: int) -> tuple[float, FailureKind | None]:
        return duration[job_id], None

    sim = simulate(jobs, 2, outcome)
    naive = run_naive(jobs, duration, 2)
    order = ", ".join(f"{j}@{t:g}s" for t, j in sim.starts)
    print("\nPriority inversion: deploy (urgent) needs build (low); docs (normal); cap 2")
    print(f"  naive poller: {'deadlock (nothing ever starts)' if naive is None else naive}")
    print(f"  clore-run:    {sim.status.value}, makespan {sim.makespan_s:g} s, starts {order}")
    return naive is None and sim.status is RunStatus.PASSED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=10, help="random DAGs per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--caps", type=int, nargs="+", default=[3, 10, 50])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.sizes, args.caps = 2, [100, 1_000], [3, 10]
    print(
        f"python {sys.version.split()[0]}; {args.seeds} random DAGs per size, equal priorities\n"
        "ratio = makespan / max(critical path, work / cap), the lower bound ('bound' names the\n"
        f"binding term for the worst DAG); naive = poll every {POLL_S:g} s, one start per poll\n"
    )
    ok = table(args.sizes, args.caps, range(args.seeds))
    ok &= inversion_case()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
