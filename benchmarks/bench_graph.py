"""Time the job graph and the pipeline loader on 10,000-job pipelines.

    python benchmarks/bench_graph.py [N]
    python benchmarks/bench_graph.py --quick    # 500 jobs

Two shapes: a chain (each job needs the one before) and a fan-out/fan-in (one root, N jobs that
need it, one sink that needs them all). The YAML text is generated in memory. Prints the best of
a few runs per step, in milliseconds. Not a pytest test: timings are reported, not asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from runner.core import graph
from runner.spec.loader import parse_pipeline


def chain_yaml(n: int) -> str:
    lines = ["name: chain", "jobs:", "  j0:", "    run: 'true'"]
    for i in range(1, n):
        lines += [f"  j{i}:", f"    needs: j{i - 1}", "    run: 'true'"]
    return "\n".join(lines) + "\n"


def fan_yaml(n: int) -> str:
    lines = ["name: fan", "jobs:", "  root:", "    run: 'true'"]
    for i in range(n):
        lines += [f"  j{i}:", "    needs: root", "    run: 'true'"]
    lines += ["  sink:", "    needs:"] + [f"      - j{i}" for i in range(n)] + ["    run: 'true'"]
    return "\n".join(lines) + "\n"


def best_ms(step: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def bench(shape: str, text: str) -> None:
    pipeline = parse_pipeline(text, f"{shape}.yml", {})
    needs = {j.id: j.needs for j in pipeline.jobs}
    hour = 3600.0

    def duration(_: str) -> float:
        return hour

    order = graph.topological_order(needs)
    rows = [
        ("topological_order", best_ms(lambda: graph.topological_order(needs), 5)),
        ("waves", best_ms(lambda: graph.waves(needs, order), 5)),
        ("critical_path", best_ms(lambda: graph.critical_path(needs, duration, order), 5)),
        ("find_cycle", best_ms(lambda: graph.find_cycle(needs), 5)),
        ("parse_pipeline+validation", best_ms(lambda: parse_pipeline(text, "b.yml", {}), 2)),
    ]
    print(f"{shape}: {len(pipeline.jobs)} jobs, {sum(len(v) for v in needs.values())} edges")
    for name, ms in rows:
        print(f"  {name:<27} {ms:9.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("n", type=int, nargs="?", default=10_000, help="jobs per pipeline")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    n = 500 if args.quick else args.n
    print(f"python {sys.version.split()[0]}, best of 5 (graph) / 2 (parse) runs")
    bench("chain", chain_yaml(n))
    bench("fan-out/fan-in", fan_yaml(n))


if __name__ == "__main__":
    main()
