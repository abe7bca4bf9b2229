"""What warmth would save: the queue's own history replayed through serve's core
(runner/core/simulate_queue.py) with keep-warm 0, 5, 15 and 60 minutes, and with the warmth
asked for, so an operator sets the knobs from data, not guesses.

From the last N days of the queue each job that ran is replayed: it becomes ready when its
first attempt asked for a server (the attempt's start less the wait it recorded), it runs for
its last attempt's own time on the server, on the GPU type and at the price its attempts ran
at. A boot takes what cold starts took (their recorded waits' median), or `boot_s` when none
is recorded. Needs are not replayed: each job is ready when it was.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runner.core.model import Job
from runner.core.rentals import Quote
from runner.core.simulate_queue import Arrival, QueueSimResult, simulate_queue
from runner.core.warm_policy import WarmPolicy
from runner.report import facts as F
from runner.stores.queue import QueueStore
from runner.stores.queue.codec import job_from_json

KEEP_WARM_MINUTES = (0, 5, 15, 60)
DEFAULT_BOOT_S = 35.0  # a healthy Clore boot, create -> SSH (design §4)
_PAGE = 1000
_RAN = ("passed", "failed", "timed_out", "error")


@dataclass(frozen=True)
class History:
    arrivals: tuple[Arrival, ...]
    offers: tuple[Quote, ...]
    boot_s: float
    boot_measured: bool


@dataclass(frozen=True)
class WhatIfRow:
    label: str
    jobs: int
    mean_wait_s: float
    p90_wait_s: float
    warm_starts: int
    orders: int
    idle_usd: float
    cost_usd: float


def read_history(
    store: QueueStore, since: float, until: float, cap: int, boot_s: float | None = None
) -> History:
    arrivals: list[Arrival] = []
    prices: dict[str, list[float]] = {}
    cold_waits: list[float] = []
    after = 0
    while page := store.jobs(None, after, _PAGE):
        after = page[-1].seq
        for row in page:
            if row.status not in _RAN or not since <= row.submitted_at < until:
                continue
            found = store.job(row.id)
            attempts = [a for a in store.attempts(row.id) if a["finished_at"] is not None]
            if found is None or not attempts:
                continue
            arrival = _arrival(job_from_json(found[1]), attempts, prices, cold_waits)
            if arrival is not None:
                arrivals.append(arrival)
    arrivals.sort(key=lambda a: a.at)
    measured = boot_s is None and bool(cold_waits)
    boot = boot_s if boot_s is not None else (
        statistics.median(cold_waits) if cold_waits else DEFAULT_BOOT_S
    )  # fmt: skip
    return History(tuple(arrivals), _offers(prices, cap), boot, measured)


def _arrival(
    job: Job,
    attempts: Sequence[dict[str, object]],
    prices: dict[str, list[float]],
    cold_waits: list[float],
) -> Arrival | None:
    first, last = attempts[0], attempts[-1]
    first_wait = F.to_float(_facts(first).get(F.SERVER_WAIT_S)) or 0.0
    ready = float(str(first["started_at"])) - first_wait
    last_wait = F.to_float(_facts(last).get(F.SERVER_WAIT_S)) or 0.0
    run_s = float(str(last["finished_at"])) - float(str(last["started_at"])) - last_wait
    for attempt in attempts:
        facts = _facts(attempt)
        wait = F.to_float(facts.get(F.SERVER_WAIT_S))
        if wait is not None and facts.get(F.WARM_SERVER) == "false" and wait > 0:
            cold_waits.append(wait)
        price = F.to_float(facts.get(F.USD_PER_HOUR))
        if price is not None:
            prices.setdefault(str(facts.get(F.GPU) or ""), []).append(price)
    gpu = str(_facts(last).get(F.GPU) or "")
    if job.gpu is not None and job.gpu.type is None and gpu:
        job = replace(job, gpu=replace(job.gpu, type=gpu))
    return Arrival(ready, job, max(0.0, run_s))


def _facts(attempt: dict[str, object]) -> dict[str, str]:
    facts = attempt.get("facts")
    return {str(k): str(v) for k, v in facts.items()} if isinstance(facts, dict) else {}


def _offers(prices: dict[str, list[float]], cap: int) -> tuple[Quote, ...]:
    """Each GPU type seen at its median price, on as many hosts as servers may be held
    (twice: a lost host is left out for a while); no price seen: a free generic server."""
    if not prices:
        prices = {"": [0.0]}
    return tuple(
        Quote(f"{gpu or 'server'}#{i}", gpu, 1, statistics.median(seen))
        for gpu, seen in sorted(prices.items())
        for i in range(2 * cap)
    )


def what_if(history: History, asked: WarmPolicy, cap: int) -> list[WhatIfRow]:
    """The table: each keep-warm, and the warmth asked for (if it is not among them)."""
    policies = [(f"keep-warm {m} min", WarmPolicy(keep_warm_s=m * 60.0)) for m in KEEP_WARM_MINUTES]
    if (
        asked.pools
        or asked.idle_budget_usd is not None
        or asked.keep_warm_s / 60 not in (KEEP_WARM_MINUTES)
    ):
        policies.append(("as asked: " + describe(asked), asked))
    rows = []
    for label, policy in policies:
        result = simulate_queue(
            history.arrivals, history.offers, policy, cap=cap, boot_s=history.boot_s
        )
        rows.append(_row(label, result))
    return rows


def describe(policy: WarmPolicy) -> str:
    words = [f"keep-warm {policy.keep_warm_s / 60:g} min"]
    words += [f"--warm {p.text()}" for p in policy.pools]
    if policy.idle_budget_usd is not None:
        words.append(f"idle budget ${policy.idle_budget_usd:g}/day")
    return ", ".join(words)


def _row(label: str, result: QueueSimResult) -> WhatIfRow:
    waits = list(result.waits_s.values())
    mean = sum(waits) / len(waits) if waits else 0.0
    return WhatIfRow(
        label,
        len(waits),
        mean,
        result.wait_percentile(0.9),
        result.warm_starts,
        result.orders,
        result.idle_usd,
        result.cost_usd,
    )


def table(rows: Sequence[WhatIfRow]) -> str:
    head = ("warmth", "jobs", "mean wait", "p90 wait", "warm starts", "orders", "idle", "cost")
    lines = [head, *(_cells(r) for r in rows)]
    widths = [max(len(x) for x in col) for col in zip(*lines, strict=True)]
    return "\n".join(_line(cells, widths) for cells in lines)


def _cells(r: WhatIfRow) -> tuple[str, ...]:
    return (
        r.label,
        str(r.jobs),
        f"{r.mean_wait_s:.1f} s",
        f"{r.p90_wait_s:.1f} s",
        str(r.warm_starts),
        str(r.orders),
        f"${r.idle_usd:.2f}",
        f"${r.cost_usd:.2f}",
    )


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    first = cells[0].ljust(widths[0])
    return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])
