"""Compare a run's summary with a baseline summary (e.g. the last run on main).

The result is the summary's `comparison` (runner.report.summary_model.Comparison): the whole
run's cost and wall-clock duration against the baseline's (`total`), the same per job present
in both runs (`jobs`), and the jobs only one of them has (`new_jobs`, `missing_jobs`). Its label
is the baseline's branch, else "baseline".

A percentage is null when the baseline figure is zero (a change from nothing has no ratio).
A baseline is a user-supplied file, so anything unexpected in it yields a warning, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runner.report.summary_model import (
    SCHEMA_VERSION,
    Comparison,
    Delta,
    JobDelta,
    Summary,
    parse_summary,
)


class BadBaseline(ValueError):
    """The baseline is not a summary this version understands."""


def parse_baseline(data: Mapping[str, Any]) -> Summary:
    """An earlier summary.json's JSON object as a summary. Raises BadBaseline."""
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA_VERSION:
        raise BadBaseline(f"baseline is not a clore-run summary with schema {SCHEMA_VERSION}")
    if not isinstance(data.get("jobs"), list):
        raise BadBaseline("summary has no job list")
    try:
        return parse_summary(data)
    except ValueError as exc:
        raise BadBaseline(f"not a summary this version reads: {exc}") from None


def compare(current: Summary, baseline: Summary) -> Comparison:
    """Cost and duration deltas of `current` against `baseline`."""
    base_jobs = {j.id: j for j in baseline.jobs}
    cur_jobs = {j.id: j for j in current.jobs}
    ci = baseline.ci
    total = _delta(
        current.total_cost_usd, current.duration_s, baseline.total_cost_usd, baseline.duration_s
    )
    jobs = [
        (job_id, _delta(job.cost_usd, job.duration_s, base.cost_usd, base.duration_s))
        for job_id, job in cur_jobs.items()
        if (base := base_jobs.get(job_id)) is not None
    ]
    return Comparison(
        label=(ci.ref_name if ci else None) or "baseline",
        baseline_run_url=(ci.run_url if ci else None) or None,
        total=total,
        jobs=[JobDelta(id=job_id, **delta.model_dump()) for job_id, delta in jobs],
        new_jobs=[j for j in cur_jobs if j not in base_jobs],
        missing_jobs=[j for j in base_jobs if j not in cur_jobs],
    )


def _delta(
    cost_usd: float, duration_s: float, base_cost_usd: float, base_duration_s: float
) -> Delta:
    cost, base_cost = _num(cost_usd), _num(base_cost_usd)
    dur, base_dur = _num(duration_s), _num(base_duration_s)
    return Delta(
        cost_usd=cost,
        baseline_cost_usd=base_cost,
        cost_delta_usd=round(cost - base_cost, 6),
        cost_delta_pct=_pct(cost, base_cost),
        duration_s=dur,
        baseline_duration_s=base_dur,
        duration_delta_s=round(dur - base_dur, 3),
        duration_delta_pct=_pct(dur, base_dur),
    )


def _num(value: float) -> float:
    """A finite number, else 0.0: Python's json reads NaN and Infinity, which would make every
    delta NaN, summary.json invalid JSON and summary.md fail to render."""
    return value if math.isfinite(value) else 0.0


def _pct(value: float, base: float) -> float | None:
    if base == 0:
        return 0.0 if value == 0 else None
    return round(100.0 * (value - base) / base, 1)
