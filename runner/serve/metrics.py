"""GET /metrics in the Prometheus text format (0.0.4), written by hand: a dozen lines do not
need a client library and its process-global registry."""

from __future__ import annotations

from collections.abc import Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(
    counts: Mapping[str, int],
    timing: Mapping[str, float],
    spend_today: float,
    servers_held: int,
    api_errors: Mapping[int, int],
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
    return "\n".join(out) + "\n"


def _family(out: list[str], name: str, kind: str, text: str) -> None:
    out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
