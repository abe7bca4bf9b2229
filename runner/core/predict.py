"""What a run will take and cost, predicted by simulating the core on today's market.

Pure: the same core that will run the pipeline is driven on a fake clock against the offers,
once per boot time of a range (the quickest, the expected, the slowest), with every job taking
its estimate (else the longest the run has seen it take, else its timeout: a ceiling).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.model import Pipeline, Provisioning, RunStatus
from runner.core.rentals import BootTimes, Market
from runner.core.servers import ServerBook
from runner.core.simulate_market import MarketModel, simulate_servers


@dataclass(frozen=True)
class Prediction:
    """Makespan and cost over a range of boot times (quickest, expected, slowest)."""

    provisioning: Provisioning
    boot_s: tuple[float, float, float]
    makespan_s: tuple[float, float, float]
    cost_usd: tuple[float, float, float]
    servers_rented: int  # at the expected boot
    fits: bool  # every job found a server within the budget (at the expected boot)
    dead_fraction: float = 0.0  # the share of hosts simulated as never coming up

    def to_json(self) -> tuple[dict[str, object], dict[str, object]]:
        """The plan's `makespan` and `cost` fields."""
        low, mid, high = self.makespan_s
        makespan = {
            "low_s": round(low, 1),
            "expected_s": round(mid, 1),
            "high_s": round(high, 1),
            "boot_s": list(self.boot_s),
            "provision": self.provisioning.value,
        }
        c_low, c_mid, c_high = self.cost_usd
        cost: dict[str, object] = {
            "low_usd": round(c_low, 6),
            "expected_usd": round(c_mid, 6),
            "high_usd": round(c_high, 6),
        }
        return makespan, cost


def predict(
    pipeline: Pipeline,
    market: Market,
    boot_range_s: tuple[float, float],
    *,
    durations_s: Mapping[str, float] | None = None,
    provisioning: Provisioning | None = None,
    hedge: HedgePolicy = NO_HEDGE,
    dead_fraction: float = 0.0,
) -> Prediction:
    """`dead_fraction`: the share of hosts that never come online (the host history's failed
    boots), each given up after the slowest boot; `hedge`: the run's hedging policy."""
    known = durations_s or {}
    seconds = {j.id: known.get(j.id, j.duration_hint_s) for j in pipeline.jobs}
    low, high = boot_range_s
    boots = (low, (low + high) / 2, high)
    mode = provisioning or pipeline.provisioning
    runs = []
    for boot in boots:
        book = ServerBook(
            pipeline.jobs,
            pipeline.concurrency,
            market=market,
            budget_usd=pipeline.budget_usd,
            provisioning=mode,
            boot=BootTimes(default_s=boots[1], allowance_s=max(high, 2 * boots[1])),
            durations_s=seconds,
            hedge=hedge,
        )
        model = MarketModel((), boot_s=(boot, boot), dead_fraction=dead_fraction)
        runs.append(simulate_servers(pipeline.jobs, book, model, lambda j, a: seconds[j]))
    mid = runs[1]
    return Prediction(
        provisioning=mode,
        boot_s=boots,
        makespan_s=_spread([r.makespan_s for r in runs]),
        cost_usd=_spread([r.cost_usd for r in runs]),
        servers_rented=mid.rents,
        fits=mid.status is not RunStatus.ERROR,
        dead_fraction=dead_fraction,
    )


def past_durations(summary: Mapping[str, Any]) -> dict[str, float]:
    """How long each job's script ran in an earlier run (its `summary.json`): the last
    attempt of each job that passed, less the time it spent getting a server. What a run
    expects a job to take when it plans rentals ahead; a job absent or odd here is left out."""
    durations: dict[str, float] = {}
    jobs = summary.get("jobs")
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict) or job.get("status") != "passed":
            continue
        attempts = job.get("attempt_details")
        last = attempts[-1] if isinstance(attempts, list) and attempts else None
        if not isinstance(last, dict) or not isinstance(job.get("id"), str):
            continue
        took, setup = last.get("duration_s"), last.get("setup_s") or 0.0
        if isinstance(took, (int, float)) and isinstance(setup, (int, float)):
            durations[job["id"]] = max(0.0, float(took) - float(setup))
    return durations


def _spread(values: list[float]) -> tuple[float, float, float]:
    """(lowest, the expected boot's, highest): a slower boot is not always dearer."""
    return (min(values), values[1], max(values))
