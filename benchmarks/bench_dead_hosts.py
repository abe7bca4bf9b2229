"""A market where most hosts never boot: hedged boots and the memory of hosts, simulated.

    python benchmarks/bench_dead_hosts.py [--quick] [--seeds N]

The core with servers runs against a simulated market (runner/core/simulate_market.py) of 20
RTX 4090 offers, priced apart by a few percent, where each host is dead (never comes online)
with the given chance, drawn once per host and seed; healthy boots take 35 s-3 min (uniform).
A dead boot is given up after the boot bound (6 minutes, the default: inside the creation fee's
grace), and each order is billed for the time it lived. For dead fractions 0, 30, 60 and 80 %
it prints, averaged over the seeds, the time to the first job's start and the total billed
cost of:

- before: no hedging, no memory, the old 15-minute bound (every dead host also paid the fee);
- plain: no hedging, no memory, the 6-minute bound;
- hedge: slow boots hedged (runner/core/hedge.py's default policy);
- memory: the second run on the same market, with the first run's host history (dead hosts
  skipped, quotes ranked by expected cost);
- both: hedging and memory;
- ideal: a healthy boot, no dead host.

over a single 10-minute job, and over a 20-job DAG (10 minutes a job, concurrency 4). The ratio
against the ideal is printed beside each time.

First, the issue's case: the three cheapest hosts never come up, a 2-minute boot bound, a fresh
ledger, concurrency 3; the first run's time to its job's start (target: 150 s) and the second
run's rentals of hosts that did not come up (target: none), with today's policy (a late boot
gets two hedges, hedges are late 30 s after their rent, the oldest racer not online gives way)
and with the one before it (one hedge at a time). Healthy boots there are as on the fake
(tests/backends/clore/test_dead_hosts.py: online in 5 s, SSH in 10-20 s), and as the market
model's (35 s-3 min). Then, on the dead-free market, the orders per
job with and without hedging (hedging must add none there), and a few hedging policies against
each other (how soon a hedge goes out: saved time at 60 % dead against orders that ran
nothing on a healthy market). Last, that every run among 60-100 % dead hosts ends, each host
rented at most once (the most events one run took: a loop would raise past the bound).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass, replace

from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk, Job
from runner.core.rentals import BootTimes, Quote
from runner.core.servers import ServerBook
from runner.core.simulate_market import (
    HEALTHY_BOOT_S,
    MarketModel,
    ModelMarket,
    ServersResult,
    simulate_servers,
)

OFFERS = tuple(
    Quote(
        str(100 + i),
        "RTX 4090",
        1,
        round(0.40 * (1 + i / 50), 4),
        creation_fee_usd=0.1,
        creation_fee_after_s=600.0,
    )
    for i in range(20)
)
JOB_S = 600.0
BOUND_S = 360.0
OLD_BOUND_S = 900.0
DEAD = (0.0, 0.3, 0.6, 0.8)
DAY_S = 86_400.0


def single() -> list[Job]:
    return [Job("train", "train", "true", 0, gpu=GpuAsk("4090"), estimate_s=JOB_S, timeout_s=3600)]


def dag(n: int = 20) -> list[Job]:
    rng = random.Random(7)
    jobs = []
    for i in range(n):
        needs = tuple(f"j{x}" for x in sorted(rng.sample(range(i), min(i, rng.randint(0, 2)))))
        jobs.append(
            Job(f"j{i}", f"j{i}", "true", i, needs, gpu=GpuAsk("4090"), estimate_s=JOB_S,
                timeout_s=3600)
        )  # fmt: skip
    return jobs


@dataclass(frozen=True)
class Setup:
    name: str
    hedge: HedgePolicy = NO_HEDGE
    memory: bool = False
    bound_s: float = BOUND_S
    dead: bool = True  # False: the ideal, on a market with no dead host


SETUPS = (
    Setup("before", bound_s=OLD_BOUND_S),
    Setup("plain"),
    Setup("hedge", HedgePolicy()),
    Setup("memory", memory=True),
    Setup("both", HedgePolicy(), memory=True),
    Setup("ideal", dead=False),
)


def run_once(
    jobs: list[Job], cap: int, setup: Setup, dead: float, seed: int, memory: HostMemory | None
) -> ServersResult:
    market = ModelMarket(OFFERS, memory, BOUND_S) if memory is not None else ModelMarket(OFFERS)
    book = ServerBook(
        jobs, cap, market=market, boot=BootTimes(default_s=180.0, allowance_s=setup.bound_s)
    )
    book.hedge = setup.hedge
    if memory is not None and memory.hosts:
        book.boot = replace(book.boot, default_s=memory.expected_boot_s())
    model = MarketModel(
        OFFERS,
        boot_s=HEALTHY_BOOT_S,
        dead_fraction=dead if setup.dead else 0.0,
        market_seed=seed % 10_000,  # the second run of `memory` is on the first one's market
    )
    seconds = {j.id: j.duration_hint_s for j in jobs}
    result = simulate_servers(jobs, book, model, lambda j, a: seconds[j], seed=seed,
                              start_unix=DAY_S * seed)  # fmt: skip
    assert not result.broken, result.broken[:3]
    return result


def run(jobs: list[Job], cap: int, setup: Setup, dead: float, seed: int) -> ServersResult:
    """One run; with memory, the second of two on the same market (the first one's history)."""
    if not setup.memory:
        return run_once(jobs, cap, setup, dead, seed, None)
    first = run_once(jobs, cap, replace(setup, memory=False), dead, seed, None)
    memory = HostMemory.of(first.host_events, DAY_S * seed + first.makespan_s + 60)
    return run_once(jobs, cap, setup, dead, seed + 10_000, memory)


def averaged(
    jobs: list[Job], cap: int, setup: Setup, dead: float, seeds: int
) -> tuple[float, float, float, float]:
    """(first start s, billed USD, orders per job, creation fees USD), means over the seeds."""
    runs = [run(jobs, cap, setup, dead, seed) for seed in range(seeds)]
    first = statistics.fmean(r.first_start_s or r.makespan_s for r in runs)
    cost = statistics.fmean(r.billed_usd for r in runs)
    orders = statistics.fmean(r.rents for r in runs) / len(jobs)
    fees = statistics.fmean(r.creation_fees_usd for r in runs)
    return first, cost, orders, fees


def table(title: str, jobs: list[Job], cap: int, seeds: int) -> None:
    print(f"{title}: time to the first job's start (x the ideal) and total cost, "
          f"mean of {seeds} markets")  # fmt: skip
    names = [s.name for s in SETUPS]
    print("  dead  " + "".join(f"{n:>22}" for n in names))
    for dead in DEAD:
        cells = [averaged(jobs, cap, s, dead, seeds) for s in SETUPS]
        ideal = cells[-1][0]
        row = "".join(
            f"{first:7.0f} s {first / ideal:4.1f}x ${cost:5.2f}" for first, cost, _, _ in cells
        )
        print(f"  {dead * 100:3.0f} % {row}")
        fees = "  ".join(f"{s.name} ${c[3]:.2f}" for s, c in zip(SETUPS, cells, strict=True))
        print(f"         creation fees: {fees}")


def orders_without_dead_hosts(seeds: int) -> None:
    for title, jobs, cap in (("single job", single(), 3), ("20-job DAG", dag(), 4)):
        plain = averaged(jobs, cap, Setup("plain"), 0.0, seeds)[2]
        hedged = averaged(jobs, cap, Setup("hedge", HedgePolicy()), 0.0, seeds)[2]
        print(f"no dead host, {title}: orders per job {plain:.3f} without hedging, "
              f"{hedged:.3f} with ({hedged / plain:.3f}x)")  # fmt: skip


def policies(seeds: int) -> None:
    """The hedging policy's knobs against each other, single job: at 60 % dead what each
    saves, and with no dead host what each costs in orders that ran nothing."""
    print("hedging policies, single job: first start, cost and orders at 60 % dead | orders "
          "with no dead host")  # fmt: skip
    tried: list[tuple[str, HedgePolicy]] = [
        ("off", NO_HEDGE),
        ("at 1.5x boot, <= bound/2 (default)", HedgePolicy()),
        ("at 1.5x boot, <= bound/4", HedgePolicy(bound_share=0.25)),
        ("at 1.5x boot, <= bound*3/4", HedgePolicy(bound_share=0.75)),
        ("at once, every boot", HedgePolicy(at_once_chance=0.0)),
    ]
    for name, policy in tried:
        first, cost, orders, _ = averaged(single(), 3, Setup(name, policy), 0.6, seeds)
        clean = averaged(single(), 3, Setup(name, policy), 0.0, seeds)[2]
        print(f"  {name:<36} {first:6.0f} s  ${cost:.3f}  {orders:.2f} orders | {clean:.2f}")


CASE_BOUND_S = 120.0
CASE_DEAD = frozenset(q.host for q in OFFERS[:3])
ONE_AT_A_TIME = HedgePolicy(fan_out=1, max_racing=2, racing_after_s=math.inf)


def case_run(seed: int, policy: HedgePolicy, boot_s: tuple[float, float],
             memory: HostMemory | None) -> ServersResult:  # fmt: skip
    """One run of the issue's case: three dead cheapest hosts, a 2-minute bound."""
    market = ModelMarket(OFFERS, memory, CASE_BOUND_S) if memory else ModelMarket(OFFERS)
    boot = BootTimes(default_s=180.0, allowance_s=CASE_BOUND_S)
    book = ServerBook(single(), 3, market=market, boot=boot, hedge=policy)
    model = MarketModel(OFFERS, boot_s=boot_s, dead_hosts=CASE_DEAD, market_seed=seed)
    seconds = {j.id: j.duration_hint_s for j in single()}
    result = simulate_servers(single(), book, model, lambda j, a: seconds[j], seed=seed,
                              start_unix=DAY_S * seed)  # fmt: skip
    assert not result.broken, result.broken[:3]
    return result


def three_dead_cheapest(seeds: int) -> None:
    print("three dead cheapest hosts, 2-minute bound, fresh ledger, concurrency 3: first run's "
          f"start, second run's rentals of hosts not up (mean of {seeds} runs)")  # fmt: skip
    for boot_name, boot_s in (("as on the fake, 10-20 s", (10.0, 20.0)),
                              ("35 s-3 min", HEALTHY_BOOT_S)):  # fmt: skip
        for name, policy in (("today", HedgePolicy()), ("one at a time", ONE_AT_A_TIME)):
            starts, not_up, orders = [], [], []
            for seed in range(seeds):
                first = case_run(seed, policy, boot_s, None)
                memory = HostMemory.of(first.host_events, DAY_S * seed + first.makespan_s + 60)
                second = case_run(seed + 10_000, policy, boot_s, memory)
                starts.append(first.first_start_s or first.makespan_s)
                not_up.append(sum(h in CASE_DEAD for h in second.rented_hosts))
                orders.append(first.rents)
            start = statistics.fmean(starts)
            print(f"  boots {boot_name:<22} {name:<14} first start {start:5.0f} s "
                  f"(max {max(starts):.0f} s), {statistics.fmean(orders):.1f} orders; second run "
                  f"rents {sum(not_up)} host(s) that did not come up")  # fmt: skip


def always_ends(seeds: int) -> None:
    """Every run among dead hosts ends, each host rented at most once: a ring of hedges once
    went round the same dead hosts for ever (seed 5 of tests/core/test_hedge.py's market).
    The simulation raises past its bound of events, so a loop fails here, it cannot hang."""
    print(f"every run ends: single job, today's policy, bounds of 2 and 6 minutes, {seeds} "
          "markets each")  # fmt: skip
    seconds = {j.id: j.duration_hint_s for j in single()}
    for dead in (0.6, 0.9, 1.0):
        runs, most, total, twice = 0, 0, 0, 0
        for bound_s in (CASE_BOUND_S, BOUND_S):
            for seed in range(seeds):
                boot = BootTimes(default_s=180.0, allowance_s=bound_s)
                book = ServerBook(single(), 3, market=ModelMarket(OFFERS), boot=boot,
                                  hedge=HedgePolicy())  # fmt: skip
                model = MarketModel(OFFERS, boot_s=HEALTHY_BOOT_S, dead_fraction=dead)
                result = simulate_servers(single(), book, model, lambda j, a: seconds[j],
                                          seed=seed)  # fmt: skip
                assert not result.broken, result.broken[:3]
                runs += 1
                most = max(most, result.events)
                total += result.events
                twice += len(result.rented_hosts) - len(set(result.rented_hosts))
        print(f"  {dead * 100:3.0f} % dead: {runs} runs ended, {total / runs:.1f} events per run, "
              f"at most {most} in one, {twice} host(s) rented twice in a run")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few markets: a few seconds")
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args()
    seeds = args.seeds or (6 if args.quick else 60)
    three_dead_cheapest(seeds)
    table("single 10-minute job", single(), 3, seeds)
    table("20-job DAG, concurrency 4", dag(), 4, max(2, seeds // 3) if args.quick else seeds)
    orders_without_dead_hosts(seeds)
    policies(seeds)
    always_ends(seeds * 5)


if __name__ == "__main__":
    main()
