"""The queue's rows and the reads of them, written once for both stores.

The SQLite file (runner/serve/store.py) and the shared PostgreSQL database
(runner/stores/pg_queue.py) keep the same rows under other table names, so every read is the
same statement but for a few words. `QueueReads` holds those statements; a store gives only
how it runs a read (`_select`, statements with `?` placeholders) and its `QueueDialect`: its
table names and the few SQL functions the two databases spell differently. What sharing adds
(owners, claims, leases) stays in the PostgreSQL store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.model import Job, JobStatus

QUEUED, RUNNING = "queued", "running"
STATUSES = (QUEUED, RUNNING, *(s.value for s in JobStatus))
FINAL = tuple(s.value for s in JobStatus)

# A job row's columns, in JobRow's order (a read may add `spec` after them).
JOB_COLUMNS = (
    "seq, id, submission, name, status, priority, submitted_at, first_started_at, finished_at, "
    "reason, attempts, cost_usd, retries_used, infra_used, retry_at"
)


@dataclass(frozen=True)
class JobRow:
    """A job as the store has it (no attempts)."""

    seq: int
    id: str
    submission: int
    name: str
    status: str
    priority: str
    submitted_at: float
    first_started_at: float | None
    finished_at: float | None
    reason: str
    attempts: int
    cost_usd: float
    retries_used: int
    infra_used: int
    retry_at: float | None


@dataclass(frozen=True)
class Unsettled:
    """A job not settled yet, with what scheduling it again needs."""

    row: JobRow
    job: Job


@dataclass(frozen=True)
class OpenAttempt:
    """An attempt row that was never completed."""

    job_id: str
    number: int
    instance: str
    started_at: float


@dataclass(frozen=True)
class JobMatch:
    """Which jobs a dashboard page lists; None matches anything."""

    status: str | None = None
    name: str | None = None  # a case-insensitive substring of the name or the id
    submission: int | None = None
    after: int | None = None  # seq
    before: int | None = None  # seq


@dataclass(frozen=True)
class QueueDialect:
    """What one store's SQL spells its own way."""

    jobs: str  # the table names
    attempts: str
    submissions: str
    find: str  # the function giving where a substring starts (0: nowhere): find(text, part)
    day: str  # the UTC day number of the unix time `{}` (a whole number, rounded down)


class QueueReads:
    """The reads both queue stores answer, over the store's `_dialect` and `_select`."""

    _dialect: QueueDialect

    def _select(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of `query` (placeholders written `?`); failures as the store's error."""
        raise NotImplementedError

    # -- what the dashboard reads ----------------------------------------------------------

    def job_page(self, match: JobMatch, limit: int) -> list[tuple[JobRow, dict[str, Any]]]:
        """A page of the jobs that `match`, in submission order, with their specs. Keyset
        paging on `seq` (after / before), never OFFSET: the last page of 10,000 costs what
        the first does."""
        where, args = self._matching(match)
        order = "ASC"
        if match.after is not None:
            where, args = [*where, "seq > ?"], [*args, match.after]
        if match.before is not None:
            where, args, order = [*where, "seq < ?"], [*args, match.before], "DESC"
        rows = self._select(
            f"SELECT {JOB_COLUMNS}, spec FROM {self._dialect.jobs}{_where(where)} "
            f"ORDER BY seq {order} LIMIT ?",
            (*args, limit),
        )
        page = [(JobRow(*r[:-1]), json.loads(r[-1])) for r in rows]
        return page[::-1] if order == "DESC" else page

    def match_counts(self, match: JobMatch) -> dict[str, int]:
        """How many jobs of each status `match` (its status and paging ignored)."""
        where, args = self._matching(JobMatch(name=match.name, submission=match.submission))
        rows = self._select(
            f"SELECT status, count(*) FROM {self._dialect.jobs}{_where(where)} GROUP BY status",
            tuple(args),
        )
        return _per_status(rows)

    def submission(self, number: int) -> tuple[str, str, float] | None:
        """kind, label, submitted_at."""
        rows = self._select(
            f"SELECT kind, label, submitted_at FROM {self._dialect.submissions} WHERE id = ?",
            (number,),
        )
        return (str(rows[0][0]), str(rows[0][1]), float(rows[0][2])) if rows else None

    def submission_attempts(self, number: int, limit: int) -> list[dict[str, Any]]:
        """The attempts of a submission's jobs (the first `limit`), for its timeline."""
        d = self._dialect
        rows = self._select(
            "SELECT a.job_id, a.number, a.started_at, a.finished_at, a.failure "
            f"FROM {d.attempts} a JOIN {d.jobs} j ON j.id = a.job_id WHERE j.submission = ? "
            "ORDER BY a.started_at LIMIT ?",
            (number, limit),
        )
        keys = ("job_id", "number", "started_at", "finished_at", "failure")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def spend_by_day(self, since: float) -> list[tuple[float, float]]:
        """(UTC day start, USD) of the attempts that ended at or after `since`, by day."""
        day = self._dialect.day.format("finished_at")
        rows = self._select(
            f"SELECT {day} AS day, sum(cost_usd) FROM {self._dialect.attempts} "
            "WHERE finished_at >= ? GROUP BY day ORDER BY day",
            (since,),
        )
        return [(float(day) * 86400, float(usd or 0.0)) for day, usd in rows]

    # -- plumbing --------------------------------------------------------------------------

    def _matching(self, match: JobMatch) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        args: list[Any] = []
        if match.status is not None:
            where, args = [*where, "status = ?"], [*args, match.status]
        if match.submission is not None:
            where, args = [*where, "submission = ?"], [*args, match.submission]
        if match.name:
            # A position, not LIKE: a user's % or _ is a character to find, not a wildcard.
            find = self._dialect.find
            where.append(f"({find}(lower(name), lower(?)) > 0 OR {find}(lower(id), lower(?)) > 0)")
            args += [match.name, match.name]
        return where, args


def _where(clauses: Sequence[str]) -> str:
    return f" WHERE {' AND '.join(clauses)}" if clauses else ""


def _per_status(rows: Sequence[tuple[Any, ...]]) -> dict[str, int]:
    return {**dict.fromkeys(STATUSES, 0), **{str(s): int(n) for s, n in rows}}
