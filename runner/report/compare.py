"""Compare a run's summary with a baseline summary (e.g. the last run on main).

The result goes into `summary["comparison"]`:

    {"label": "main",                      # the baseline's branch, else "baseline"
     "baseline_run_url": str | null,
     "total": delta,                       # the whole run: cost, and wall-clock duration
     "jobs": [{"id": ..., **delta}],       # jobs present in both runs
     "new_jobs": [id], "missing_jobs": [id]}
    delta = {"cost_usd", "baseline_cost_usd", "cost_delta_usd", "cost_delta_pct",
             "duration_s", "baseline_duration_s", "duration_delta_s", "duration_delta_pct"}

A percentage is null when the baseline figure is zero (a change from nothing has no ratio).
A baseline is a user-supplied file, so anything unexpected in it yields a warning, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runner.report.summary import SCHEMA_VERSION, Summary


class BadBaseline(ValueError):
    """The baseline is not a summary this version understands."""


def compare(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> Summary:
    """Cost and duration deltas of `current` against `baseline`. Raises BadBaseline."""
    if not isinstance(baseline, Mapping) or baseline.get("schema") != SCHEMA_VERSION:
        raise BadBaseline(f"baseline is not a clore-run summary with schema {SCHEMA_VERSION}")
    base_jobs = _jobs_by_id(baseline)
    cur_jobs = _jobs_by_id(current)
    ci = baseline.get("ci")
    ci = ci if isinstance(ci, Mapping) else {}
    return {
        "label": str(ci.get("ref_name") or "baseline"),
        "baseline_run_url": ci.get("run_url") or None,
        "total": _delta(current, baseline, "total_cost_usd"),
        "jobs": [
            {"id": job_id, **_delta(job, base_jobs[job_id], "cost_usd")}
            for job_id, job in cur_jobs.items()
            if job_id in base_jobs
        ],
        "new_jobs": [j for j in cur_jobs if j not in base_jobs],
        "missing_jobs": [j for j in base_jobs if j not in cur_jobs],
    }


def _jobs_by_id(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    jobs = summary.get("jobs")
    if not isinstance(jobs, list):
        raise BadBaseline("summary has no job list")
    return {str(j["id"]): j for j in jobs if isinstance(j, Mapping) and "id" in j}


def _delta(cur: Mapping[str, Any], base: Mapping[str, Any], cost_key: str) -> Summary:
    cost, base_cost = _num(cur.get(cost_key)), _num(base.get(cost_key))
    dur, base_dur = _num(cur.get("duration_s")), _num(base.get("duration_s"))
    return {
        "cost_usd": cost,
        "baseline_cost_usd": base_cost,
        "cost_delta_usd": round(cost - base_cost, 6),
        "cost_delta_pct": _pct(cost, base_cost),
        "duration_s": dur,
        "baseline_duration_s": base_dur,
        "duration_delta_s": round(dur - base_dur, 3),
        "duration_delta_pct": _pct(dur, base_dur),
    }


def _num(value: object) -> float:
    """A finite number, else 0.0: Python's json reads NaN and Infinity, which would make every
    delta NaN, summary.json invalid JSON and summary.md fail to render."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) else 0.0


def _pct(value: float, base: float) -> float | None:
    if base == 0:
        return 0.0 if value == 0 else None
    return round(100.0 * (value - base) / base, 1)
