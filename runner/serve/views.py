"""Store rows → API replies, and the one question only a reader asks: why has it not started?"""

from __future__ import annotations

import datetime as dt
from typing import Any

from runner.serve.api_models import AttemptView, JobDetail, JobSummary
from runner.serve.store import FINAL, JobRow, Store


def summary(row: JobRow) -> JobSummary:
    return JobSummary(
        id=row.id,
        name=row.name,
        status=row.status,
        priority=row.priority,
        submitted_at=row.submitted_at,
        started_at=row.first_started_at,
        finished_at=row.finished_at,
        reason=row.reason,
        attempts=row.attempts,
        cost_usd=row.cost_usd,
    )


def detail(
    store: Store, row: JobRow, spec: dict[str, Any], now: float, held_until: float | None
) -> JobDetail:
    attempts = [AttemptView.model_validate(a) for a in store.attempts(row.id)]
    return JobDetail(
        **summary(row).model_dump(),
        needs=list(spec.get("needs", [])),
        waiting_for=waiting_for(store, row, spec, now, held_until),
        server=attempts[-1].server if attempts else "",
        attempt_list=attempts,
        spec=spec,
    )


def waiting_for(
    store: Store, row: JobRow, spec: dict[str, Any], now: float, held_until: float | None
) -> str | None:
    if row.status != "queued":
        return None
    for need in spec.get("needs", []):
        found = store.job(need)
        if found is not None and found[0].status not in FINAL:
            return f"needs '{need}' ({found[0].status})"
    not_before = spec.get("not_before")
    if not_before is not None and now < not_before:
        return f"not before {_iso(not_before)}"
    if row.retry_at is not None and now < row.retry_at:
        return f"a retry at {_iso(row.retry_at)}"
    if held_until is not None and now < held_until:
        return f"the daily spend limit (until {_iso(held_until)})"
    return "a free slot"


def _iso(when: float) -> str:
    try:
        return dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # past year 9999 in UTC: 9999-12-31T23:59-23:59
        return f"{when:.0f} s after 1970-01-01T00:00:00Z"
