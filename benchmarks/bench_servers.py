"""The core with servers, simulated: rent ahead vs on demand, beside the bound; and its speed.

    python benchmarks/bench_servers.py [--quick] [--boots 25 300]

For the ML example (examples/ml-pipeline.yml, its `estimate-minutes` as the durations) and a
4-level DAG on four GPU types, at each boot time B, it prints the simulated makespan and cost
with `provision: ahead` and `provision: on-demand`, the bound max(critical path, work / cap)
+ 1.1 B, the rentals made and the idle time (held and up, running nothing) against busy time.
Then the CPU time of a 10,000-job run through the core with servers (8 fixed hosts) against
the plain scheduler on the same DAG in the same run (target: the same order of magnitude, and
under 1 s), without the simulator's per-step checks (the plain simulation has none), and with
them. Each timed run starts after a full garbage collection and keeps only its makespan, so no
run pays for walking another's leftovers. Last, the CPU time of a chain submitted a job at a
time (serve's worst case for ranks: each new job lengthens every older one's path), through
`ServerBook.add_jobs` alone and through `PlacingCore.add`. Figures are reported, not asserted.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from dataclasses import replace
from pathlib import Path

from runner.core import graph
from runner.core.model import GpuAsk, Job, Pipeline, Provisioning
from runner.core.placing import PlacingCore
from runner.core.rentals import BootTimes, Quote
from runner.core.scheduler import Entry
from runner.core.servers import ServerBook
from runner.core.simulate import simulate
from runner.core.simulate_market import MarketModel, ModelMarket, simulate_servers
from runner.spec.loader import load_pipeline

ROOT = Path(__file__).resolve().parents[1]
TYPES = ("RTX 3090", "RTX 4090", "A100", "H100")
# Prices with the renter's fee, USD per hour, a few hosts of each type.
OFFERS = tuple(
    Quote(
        f"{t}#{i}",
        t,
        1,
        round(price * (1 + i / 10), 3),
        creation_fee_usd=0.1,
        creation_fee_after_s=600.0,
    )
    for t, price in zip(TYPES, (0.15, 0.45, 1.2, 2.4), strict=True)
    for i in range(6)
)


def four_levels() -> Pipeline:
    """Four levels, two jobs a level on GPU types that change at every level; each job needs
    both of the level above. Ten minutes a job."""
    jobs: list[Job] = []
    for level in range(4):
        for k in range(2):
            needs = tuple(f"l{level - 1}{j}" for j in range(2)) if level else ()
            gpu = GpuAsk(type=TYPES[(level + k) % 4])
            jobs.append(
                Job(f"l{level}{k}", f"l{level}{k}", "true", len(jobs), needs, gpu=gpu,
                    estimate_s=600.0, timeout_s=1800.0)
            )  # fmt: skip
    return Pipeline("four-levels", tuple(jobs), concurrency=4)


def ml_example() -> Pipeline:
    return load_pipeline(ROOT / "examples" / "ml-pipeline.yml", environ={})


def bound_s(pipeline: Pipeline) -> float:
    seconds = {j.id: j.duration_hint_s for j in pipeline.jobs}
    _, path_s = graph.critical_path({j.id: j.needs for j in pipeline.jobs}, seconds.__getitem__)
    return max(path_s, sum(seconds.values()) / pipeline.concurrency)


def figures(pipeline: Pipeline, boot_s: float) -> None:
    seconds = {j.id: j.duration_hint_s for j in pipeline.jobs}
    bound = bound_s(pipeline)
    print(f"{pipeline.name}, boot {boot_s:g} s: bound {bound:.0f} s + 1.1 boots = "
          f"{bound + 1.1 * boot_s:.0f} s")  # fmt: skip
    for mode in Provisioning:
        book = ServerBook(
            pipeline.jobs, pipeline.concurrency, market=ModelMarket(OFFERS),
            budget_usd=pipeline.budget_usd, provisioning=mode,
            boot=BootTimes(default_s=boot_s, allowance_s=max(900.0, 2 * boot_s)),
        )  # fmt: skip
        model = MarketModel(OFFERS, boot_s=(boot_s, boot_s))
        r = simulate_servers(pipeline.jobs, book, model, lambda j, a: seconds[j])
        idle = 100 * r.idle_s / r.busy_s if r.busy_s else 0.0
        print(f"  {mode.value:<9} makespan {r.makespan_s:6.0f} s ({r.makespan_s / bound:.3f} x "
              f"bound), cost ${r.cost_usd:.3f}, {r.rents} rentals, idle {idle:.1f} % of busy, "
              f"{r.status.value}")  # fmt: skip


def random_jobs(n: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        lo = max(0, i - 100)
        needs = tuple(
            f"j{x}" for x in sorted(rng.sample(range(lo, i), min(i - lo, rng.randint(0, 3))))
        )
        jobs.append(Job(f"j{i}", f"j{i}", "true", i, needs, estimate_s=rng.uniform(10, 600)))
    return jobs


def speed(n: int) -> None:
    jobs = random_jobs(n, 1)
    seconds = {j.id: j.estimate_s or 0.0 for j in jobs}
    hosts = [Quote(f"h{i}") for i in range(8)]

    def plain() -> float:
        return simulate(jobs, 8, lambda j, a: (seconds[j], None)).makespan_s

    def placed(checks: bool) -> float:
        # Without the simulator's checks of the core's promises after every step: the plain
        # scheduler's simulation has none, and the figure is the core's.
        book = ServerBook(jobs, 8, fixed_hosts=hosts)
        run = simulate_servers(jobs, book, MarketModel(()), lambda j, a: seconds[j], checks=checks)
        assert not run.broken
        return run.makespan_s

    # Each run keeps only its makespan, and starts after a full collection: the garbage
    # collector's passes would otherwise walk the 10,000 results an earlier run left behind,
    # and time that run's leftovers, not this run (the collector stays on within each run).
    times, makespans = [], []
    for run in (plain, lambda: placed(False), lambda: placed(True)):
        gc.collect()
        t0 = time.process_time()
        makespans.append(run())
        times.append(time.process_time() - t0)
    assert makespans[1] == makespans[2]
    t_plain, t_placed, t_checked = times
    print(f"{n} jobs, 8 hosts: plain scheduler {t_plain:.2f} s CPU, with servers {t_placed:.2f} s "
          f"({t_placed / max(t_plain, 1e-9):.1f}x; {t_checked:.2f} s with the simulator's "
          f"checks); makespans {makespans[0]:.0f} s and {makespans[1]:.0f} s")  # fmt: skip


def chain_one_at_a_time(n: int) -> None:
    """Serve's worst case for ranks: a chain submitted a job at a time, each new job needing
    the last, none settled (every add lengthens every older job's remaining path)."""
    jobs = [
        Job(f"c{i}", f"c{i}", "true", 0, (f"c{i - 1}",) if i else (), estimate_s=60.0)
        for i in range(n)
    ]
    gc.collect()
    t0 = time.process_time()
    book = ServerBook((), 8, fixed_hosts=[Quote(f"h{i}") for i in range(8)])
    for job in jobs:
        book.add_jobs([job], 0.0)
    t_book = time.process_time() - t0
    gc.collect()
    t0 = time.process_time()
    fixed = ServerBook((), 8, fixed_hosts=[Quote(f"h{i}") for i in range(8)])
    core = PlacingCore((), fixed, ongoing=True)
    for i, job in enumerate(jobs):
        core.add([Entry(job, i)], {}, 0.0)
    t_core = time.process_time() - t0
    print(f"a chain of {n} jobs added one at a time: ServerBook.add_jobs {t_book:.2f} s CPU, "
          f"PlacingCore.add {t_core:.2f} s CPU")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one boot time, 1,000 jobs")
    parser.add_argument("--boots", type=float, nargs="+", default=[25.0, 300.0])
    args = parser.parse_args()
    boots = [25.0] if args.quick else args.boots
    for pipeline in (ml_example(), four_levels()):
        for boot in boots:
            figures(replace(pipeline), boot)
    speed(1000 if args.quick else 10_000)
    chain_one_at_a_time(1000 if args.quick else 4000)


if __name__ == "__main__":
    main()
