"""What the dashboard's pages show, read from the queue's store and service.

The dashboard reads through `Queue` (a few attributes of the service) and the store's read
methods only: whatever runs the queue underneath plugs in by offering these.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runner.serve.views import look
from runner.stores.queue import FINAL, STATUSES, JobMatch, JobRow, QueueStore

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
SPEND_DAYS = 30


class Queue(Protocol):
    """The service as the dashboard sees it."""

    store: QueueStore

    def now(self) -> float: ...

    def waiting_for(self, job_id: str) -> str | None: ...

    @property
    def held_until(self) -> float | None: ...

    @property
    def servers_held(self) -> int: ...

    def spent_today(self, now: float | None = None) -> float: ...

    def idle_rows(self) -> list[tuple[str, str, float, float]]: ...

    def cancel(self, job_id: str) -> str: ...


@dataclass(frozen=True)
class Settings:
    """What the server was started with."""

    data_dir: Path  # logs/<job id>.log and artifacts/<job id>/ are under it
    capacity: int
    daily_spend_limit_usd: float | None
    idle_budget_usd: float | None = None  # --idle-budget


@dataclass(frozen=True)
class JobLine:
    """One row of the queue table."""

    row: JobRow
    waiting_for: str | None
    not_before: float | None
    server: str
    usd_per_hour: float | None
    cost_usd: float  # so far: ended attempts, plus the running one at its price
    status_text: str = ""  # as a person reads it: `failed (allowed)` (views.look)
    tone: str = ""  # its look's class, `tone-allowed`: the colour every report gives it


@dataclass(frozen=True)
class QueuePage:
    match: JobMatch
    lines: list[JobLine]
    counts: dict[str, int]
    total: int
    newer: int | None  # `before` for the previous page, None on the first
    older: int | None  # `after` for the next page, None on the last


def queue_page(queue: Queue, match: JobMatch, limit: int) -> QueuePage:
    store, now = queue.store, queue.now()
    rows = store.job_page(match, limit + 1)  # one more: is there a page beyond?
    more = len(rows) > limit
    if match.before is not None:
        page = rows[1:] if more else rows
        newer_exist, older_exist = more, True
    else:
        page = rows[:limit]
        newer_exist, older_exist = match.after is not None, more
    counts = store.match_counts(match)
    total = counts[match.status] if match.status else sum(counts.values())
    return QueuePage(
        match=match,
        lines=[job_line(queue, row, spec, now) for row, spec in page],
        counts=counts,
        total=total,
        newer=page[0][0].seq if page and newer_exist else None,
        older=page[-1][0].seq if page and older_exist else None,
    )


def job_line(queue: Queue, row: JobRow, spec: dict[str, Any], now: float) -> JobLine:
    attempts = queue.store.attempts(row.id) if row.attempts else []
    last = attempts[-1] if attempts else None
    price = usd_per_hour(last) if last else None
    cost = row.cost_usd
    if last is not None and last["finished_at"] is None and price is not None:
        cost += price * max(0.0, now - last["started_at"]) / 3600
    seen = look(row.status, spec, row.attempts)
    return JobLine(
        row=row,
        waiting_for=queue.waiting_for(row.id) if row.status == "queued" else None,
        not_before=spec.get("not_before"),
        server=str(last["server"]) if last else "",
        usd_per_hour=price,
        cost_usd=cost,
        status_text=seen.words,
        tone=seen.css,
    )


def usd_per_hour(attempt: Mapping[str, Any]) -> float | None:
    """The attempt's hourly price: as its server quoted it (with fees), else what it cost
    over how long it ran; None while neither is known."""
    quoted = attempt.get("facts", {}).get("usd_per_hour")
    if quoted is not None:
        try:
            return float(quoted)
        except ValueError:
            pass  # a server's fact is text from outside: unreadable is unknown
    if not attempt.get("cost_usd"):
        # Nothing billed and no price quoted (a local slot): no rate, as a job that took under
        # a second shows, rather than `$0.0000/h` beside `—` for the same kind of job.
        return None
    ended, began = attempt.get("finished_at"), float(attempt["started_at"])
    if ended is None or float(ended) - began < 1.0:
        return None
    return float(attempt["cost_usd"]) * 3600 / (float(ended) - began)


@dataclass(frozen=True)
class JobPageData:
    row: JobRow
    spec: dict[str, Any]
    line: JobLine
    attempts: list[dict[str, Any]]
    artifacts: list[tuple[str, int]]  # path under artifacts/<job>/, bytes
    log_bytes: int
    final: bool


MAX_ARTIFACTS_LISTED = 500


def job_page(queue: Queue, settings: Settings, job_id: str) -> JobPageData | None:
    found = queue.store.job(job_id)
    if found is None:
        return None
    row, spec = found
    return JobPageData(
        row=row,
        spec=spec,
        line=job_line(queue, row, spec, queue.now()),
        attempts=queue.store.attempts(job_id),
        artifacts=artifacts(settings.data_dir / "artifacts" / job_id),
        log_bytes=_size(log_path(settings, job_id)),
        final=row.status in FINAL,
    )


def log_path(settings: Settings, job_id: str) -> Path:
    return settings.data_dir / "logs" / f"{job_id}.log"


def artifacts(folder: Path) -> list[tuple[str, int]]:
    """Files under the job's artifact folder, as paths relative to it: the first ones in name
    order, a bounded walk (a job may leave thousands). Symlinks are not followed."""
    out: list[tuple[str, int]] = []
    if not folder.is_dir():
        return out
    for root, dirs, files in os.walk(folder):  # walk does not enter symlinked folders
        dirs.sort()
        for name in sorted(files):
            path = Path(root, name)
            if path.is_file() and not path.is_symlink():
                out.append((path.relative_to(folder).as_posix(), _size(path)))
            if len(out) >= MAX_ARTIFACTS_LISTED:
                return out
    return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class SubmissionData:
    number: int
    kind: str
    label: str
    submitted_at: float
    jobs: list[tuple[JobRow, dict[str, Any]]]
    total: int  # jobs in the submission; `jobs` may hold fewer
    attempts: list[dict[str, Any]]


MAX_DRAWN_JOBS = 400  # a larger DAG is listed, not drawn: nobody reads 10,000 boxes


def submission(queue: Queue, number: int) -> SubmissionData | None:
    found = queue.store.submission(number)
    if found is None:
        return None
    kind, label, submitted_at = found
    match = JobMatch(submission=number)
    jobs = queue.store.job_page(match, MAX_DRAWN_JOBS)
    return SubmissionData(
        number=number,
        kind=kind,
        label=label,
        submitted_at=submitted_at,
        jobs=jobs,
        total=sum(queue.store.match_counts(match).values()),
        attempts=queue.store.submission_attempts(number, MAX_DRAWN_JOBS * 4),
    )


@dataclass(frozen=True)
class SpendData:
    today_usd: float
    daily_limit_usd: float | None
    held_until: float | None
    by_day: list[tuple[str, float]]  # (YYYY-MM-DD, USD), oldest first, every day shown
    total_usd: float
    servers_held: int
    running: int
    capacity: int
    # Idle money, its own figure: what rented servers cost while they ran no job.
    idle_today_usd: float = 0.0
    idle_budget_usd: float | None = None
    idle_rows: list[tuple[str, str, float, float]] = field(default_factory=list)  # newest first


def spend(queue: Queue, settings: Settings) -> SpendData:
    now = queue.now()
    today = _day_start(now)
    since = today - (SPEND_DAYS - 1) * 86400
    spent = dict(queue.store.spend_by_day(since))
    days = [since + i * 86400 for i in range(SPEND_DAYS)]
    counts = queue.store.counts()
    held = queue.held_until
    idle = queue.idle_rows()
    return SpendData(
        today_usd=queue.spent_today(now),
        daily_limit_usd=settings.daily_spend_limit_usd,
        held_until=held if held is not None and held > now else None,
        by_day=[(_date(d), spent.get(d, 0.0)) for d in days],
        total_usd=queue.store.timing()["spend"],
        servers_held=queue.servers_held,
        running=counts["running"],
        capacity=settings.capacity,
        idle_today_usd=sum(u for d, _, u, _ in idle if d == _date(today)),
        idle_budget_usd=settings.idle_budget_usd,
        idle_rows=list(reversed(idle)),
    )


def statuses() -> Sequence[str]:
    return STATUSES


def _day_start(now: float) -> float:
    return float(int(now // 86400) * 86400)  # UTC days: the epoch has no leap seconds


def _date(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%d")
