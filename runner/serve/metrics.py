"""GET /metrics in the Prometheus text format (0.0.4), written by hand: a dozen lines do not
need a client library and its process-global registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(
    counts: Mapping[str, int],
    timing: Mapping[str, float],
    spend_today: float,
    servers_held: int,
    api_errors: Mapping[int, int],
    idle: Idle | None = None,
) -> str:
    out: list[str] = []
    _family(out, "clore_run_jobs", "gauge", "Jobs in the queue database, by status.")
    out += [f'clore_run_jobs{{status="{s}"}} {n}' for s, n in sorted(counts.items())]
    _family(out, "clore_run_queue_wait_seconds", "summary", "Submission to first start.")
    out += [
        f"clore_run_queue_wait_seconds_sum {timing['wait_sum']:.6f}",
        f"clore_run_queue_wait_seconds_count {timing['wait_count']:.0f}",
    ]
    _family(out, "clore_run_attempt_seconds", "summary", "Run time of finished attempts.")
    out += [
        f"clore_run_attempt_seconds_sum {timing['run_sum']:.6f}",
        f"clore_run_attempt_seconds_count {timing['run_count']:.0f}",
    ]
    _family(out, "clore_run_spend_usd_total", "counter", "USD spent on attempts, all time.")
    out.append(f"clore_run_spend_usd_total {timing['spend']:.6f}")
    _family(out, "clore_run_spend_today_usd", "gauge", "USD spent since 00:00 UTC.")
    out.append(f"clore_run_spend_today_usd {spend_today:.6f}")
    _family(out, "clore_run_servers_held", "gauge", "Servers rented, or running a job.")
    out.append(f"clore_run_servers_held {servers_held}")
    _family(out, "clore_run_api_errors_total", "counter", "API replies with status >= 400.")
    out += [f'clore_run_api_errors_total{{code="{c}"}} {n}' for c, n in sorted(api_errors.items())]
    if idle is not None:
        _idle(out, idle)
    return "\n".join(out) + "\n"


class Idle(NamedTuple):
    """Idle money: today's UTC day, rows (day, GPU model, USD, seconds), the idle budget."""

    today: str
    rows: Sequence[tuple[str, str, float, float]]
    budget_usd: float | None


def _idle(out: list[str], idle: Idle) -> None:
    """Today's idle money by GPU type (Prometheus keeps the days): its own figure, in no
    attempt's spend."""
    today = [(gpu, usd, s) for day, gpu, usd, s in idle.rows if day == idle.today]
    _family(out, "clore_run_idle_usd_today", "gauge", "USD idle servers cost since 00:00 UTC.")
    out += [f'clore_run_idle_usd_today{{gpu="{_label(g)}"}} {u:.6f}' for g, u, _ in today]
    _family(out, "clore_run_idle_seconds_today", "gauge", "Idle server seconds since 00:00 UTC.")
    out += [f'clore_run_idle_seconds_today{{gpu="{_label(g)}"}} {s:.3f}' for g, _, s in today]
    if idle.budget_usd is not None:
        _family(out, "clore_run_idle_budget_usd", "gauge", "--idle-budget: USD a UTC day.")
        out.append(f"clore_run_idle_budget_usd {idle.budget_usd:.6f}")


def _label(value: str) -> str:
    """A label value as the text format escapes it (a GPU name is the market's text)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(out: list[str], name: str, kind: str, text: str) -> None:
    out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
