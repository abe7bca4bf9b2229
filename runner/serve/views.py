"""Store rows → API replies, and the one question only a reader asks: why has it not started?"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, overload

from runner import outcome as O
from runner.core.scheduler import JobState, Phase
from runner.serve.api_models import AttemptView, JobDetail, JobSummary
from runner.stores.queue import JobRow, QueueStore

_ALLOWABLE = ("failed", "timed_out", "error")


def allowed_failure(status: str, spec: Mapping[str, Any] | None) -> bool:
    """It failed and its `continue-on-error` lets that pass: it reads "failed (allowed)", as
    in `run`'s reports, not as a plain failure."""
    return status in _ALLOWABLE and bool(spec and spec.get("continue_on_error"))


def look(status: str, spec: Mapping[str, Any] | None, attempts: int = 1) -> O.Outcome:
    """The job's outcome as `run`'s reports word and colour it (runner.outcome): `timed out`,
    `failed (allowed)`, `passed (flaky)` for a pass after a retry."""
    return O.outcome(status, allowed=allowed_failure(status, spec), flaky=attempts > 1)


def status_words(status: str, spec: Mapping[str, Any] | None, attempts: int = 1) -> str:
    """The status as a person reads it: `failed (allowed)` for an allowed failure."""
    return look(status, spec, attempts).words


def summary(
    row: JobRow, spec: Mapping[str, Any] | None = None, waits_for: str | None = None
) -> JobSummary:
    return JobSummary(
        id=row.id,
        name=row.name,
        status=row.status,
        allowed_failure=row.continue_on_error or allowed_failure(row.status, spec),
        priority=row.priority,
        submitted_at=api_time(row.submitted_at),
        started_at=api_time(row.first_started_at),
        finished_at=api_time(row.finished_at),
        reason=row.reason,
        attempts=row.attempts,
        cost_usd=row.cost_usd,
        waiting_for=waits_for if row.status == "queued" else None,
        trust=row.trust,
    )


def detail(
    store: QueueStore, row: JobRow, spec: dict[str, Any], waits_for: str | None
) -> JobDetail:
    """`waits_for`: the scheduler's own answer to why the job has not started (`waiting_for`)."""
    attempts = [
        AttemptView.model_validate(
            {
                **a,
                "started_at": api_time(a["started_at"]),
                "finished_at": api_time(a["finished_at"]),
            }
        )
        for a in store.attempts(row.id)
    ]
    return JobDetail(
        **summary(row, spec, waits_for).model_dump(),
        needs=list(spec.get("needs", [])),
        server=attempts[-1].server if attempts else "",
        attempt_list=attempts,
        spec=spec,
    )


def waiting_for(state: JobState, need_out: bool, now: float, held_until: float | None) -> str:
    """Why a job the scheduler holds has not started. `need_out`: the first need it waits for
    has an attempt out."""
    if state.server is not None:  # ready, and the core finds it a server
        return state.server
    if state.phase is Phase.WAITING and state.needs:
        return f"needs '{state.needs[0]}' ({'running' if need_out else 'queued'})"
    if state.phase is Phase.TIMER and state.until is not None:
        what = "a retry at" if state.attempts else "not before"
        return f"{what} {iso(state.until)}"
    if held_until is not None and now < held_until:
        return f"the daily spend limit (until {iso(held_until)})"
    return "a free slot"


@overload
def api_time(when: float) -> str: ...
@overload
def api_time(when: float | None) -> str | None: ...
def api_time(when: float | None) -> str | None:
    """A time in a reply: ISO 8601 in UTC as summary.json writes it, to the millisecond."""
    if when is None:
        return None
    try:
        moment = dt.datetime.fromtimestamp(when, dt.timezone.utc)
    except (OverflowError, ValueError, OSError):  # past year 9999: said, not a crash
        return iso(when)
    return moment.isoformat(timespec="milliseconds")


def iso(when: float) -> str:
    try:
        return dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # past year 9999 in UTC: 9999-12-31T23:59-23:59
        return f"{when:.0f} s after 1970-01-01T00:00:00Z"


def api_day(when: float) -> str:
    """The UTC day `when` falls in, YYYY-MM-DD (as the idle money's rows name days)."""
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%d")
