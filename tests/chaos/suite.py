"""One scenario from its seed to its verdict: what the tests, `python -m tests.chaos` and the
long benchmark (benchmarks/bench_chaos.py) share."""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.harness import Outcome, play_scenario, reproduce_command
from tests.chaos.invariants import Violation, check
from tests.chaos.market import SshdPool
from tests.chaos.scenario import Scenario, draw


@dataclass
class Verdict:
    scenario: Scenario
    outcome: Outcome
    violations: list[Violation]
    seconds: float

    @property
    def exit_codes(self) -> list[int | None]:
        return [r.code for r in self.outcome.runs]

    def report(self) -> str:
        """What a failure prints: the seed, how to replay it, what broke, what the runs said."""
        lines = [
            f"chaos {self.scenario.describe()}",
            f"reproduce: {reproduce_command(self.scenario)}",
            f"exit codes: {self.exit_codes}",
        ]
        lines += [f"  VIOLATION {v}" for v in self.violations]
        for run in self.outcome.runs:
            if self.violations:
                lines.append(f"--- run {run.caller}: {' '.join(run.command[3:6])} ...")
                lines += [f"    {line}" for line in (run.stdout + run.stderr).splitlines()[-40:]]
                if run.cleanup_output:
                    lines.append(f"--- run {run.caller}'s cleanup (exit {run.cleanup_code})")
                    lines += [f"    {line}" for line in run.cleanup_output.splitlines()[-15:]]
        return "\n".join(lines)


def run_seed(seed: int, sshds: SshdPool, folder: Path, *, small: bool = False) -> Verdict:
    return run_scenario(draw(seed, small=small), sshds, folder)


def run_scenario(scenario: Scenario, sshds: SshdPool, folder: Path) -> Verdict:
    import time

    where = folder / f"seed-{scenario.seed}"
    shutil.rmtree(where, ignore_errors=True)
    started = time.monotonic()
    sshds.new_containers()
    outcome = play_scenario(scenario, sshds, where)
    violations = check(outcome)
    return Verdict(scenario, outcome, violations, time.monotonic() - started)


def play_seeds(
    seeds: list[int], folder: Path, *, small: bool = False, jobs: int = 1
) -> Iterator[Verdict]:
    """Each seed's verdict, as each ends; `jobs` scenarios at a time."""
    return play_all([draw(seed, small=small) for seed in seeds], folder, jobs=jobs)


def play_all(scenarios: list[Scenario], folder: Path, *, jobs: int = 1) -> Iterator[Verdict]:
    """Each scenario's verdict, as each ends; `jobs` at a time, each worker with sshds of its
    own (a preemption stops every session of its host's sshd)."""
    todo: queue.Queue[Scenario] = queue.Queue()
    for scenario in scenarios:
        todo.put(scenario)
    done: queue.Queue[Verdict | BaseException] = queue.Queue()

    def worker(index: int) -> None:
        try:
            sshds = SshdPool(folder / f"sshd-{index}")
        except BaseException as e:
            done.put(e)
            return
        try:
            while True:
                try:
                    scenario = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put(run_scenario(scenario, sshds, folder))
                except BaseException as e:
                    done.put(e)
        finally:
            sshds.stop()

    threads = [
        threading.Thread(target=worker, args=(i,), daemon=True)
        for i in range(max(1, min(jobs, len(scenarios))))
    ]
    for thread in threads:
        thread.start()
    for _ in scenarios:
        item = done.get()
        if isinstance(item, BaseException):
            raise item
        yield item
    for thread in threads:
        thread.join()
