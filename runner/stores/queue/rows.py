"""The queue's rows and the reads of them, written once for both halves.

The SQLite file (runner/stores/queue/sqlite.py) and the shared PostgreSQL database
(runner/stores/queue/postgres.py) keep the same rows under other table names, so every read is the
same statement but for a few words. `QueueReads` holds those statements; a store gives only
how it runs a read (`_select`, statements with `?` placeholders, which PostgreSQL's store
turns into psycopg's `%s`: so no statement here holds a literal `?` or `%`) and its
`QueueDialect`: its table names and the few SQL functions the two databases spell
differently. The writes stay in each store (SQLite's are one server's; PostgreSQL's are fenced
by an owner), and so does what sharing adds (claims, leases, take-overs); only the facts a
placed attempt records are encoded here (`placed_facts`), so both stores record the same.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from runner.core.model import Attempt, Job, JobResult, JobStatus
from runner.errors import InfrastructureError
from runner.stores.queue.codec import dumps, failure_from, job_from_json

QUEUED, RUNNING = "queued", "running"
STATUSES = (QUEUED, RUNNING, *(s.value for s in JobStatus))
FINAL = tuple(s.value for s in JobStatus)
_FINAL_LIST = ", ".join(f"'{s}'" for s in FINAL)

# A job row's columns, in JobRow's order (a read may add `spec` after them).
JOB_COLUMNS = (
    "seq, id, submission, name, status, priority, submitted_at, first_started_at, finished_at, "
    "reason, attempts, cost_usd, retries_used, infra_used, retry_at, trust"
)
_ATTEMPT_KEYS = (
    "number", "instance", "started_at", "finished_at", "exit_code", "failure", "message",
    "server", "cost_usd",
)  # fmt: skip
_MARKS_PER_STATEMENT = 500  # SQLite limits the number of `?` in one statement


class QueueError(InfrastructureError):
    """The queue database cannot be opened, read or written."""


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
    trust: str  # the submission's trust domain (a checked name: runner/spec/trust.py)
    continue_on_error: bool = False  # filled by the reads that need it (the API's job list)


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
    idle: str  # idle money: each instance's figures by (UTC day, GPU model)
    find: str  # the function giving where a substring starts (0: nowhere): find(text, part)
    day: str  # the UTC day number of the unix time `{}` (a whole number, rounded down)
    arrays: bool  # binds a list as one array (`= ANY(?)`); else one `?` per value


class QueueReads:
    """The reads both queue stores answer, over the store's `_dialect` and `_select`."""

    _dialect: QueueDialect

    def _select(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of `query` (placeholders written `?`); failures as the store's error."""
        raise NotImplementedError

    def known(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` name jobs in the store."""
        found: set[str] = set()
        for among, args in self._among("id", ids):
            rows = self._select(f"SELECT id FROM {self._dialect.jobs} WHERE {among}", args)
            found.update(str(r[0]) for r in rows)
        return found

    def unsettled(self) -> list[Unsettled]:
        """Jobs queued or running, in submission order."""
        rows = self._select(
            f"SELECT {JOB_COLUMNS}, spec FROM {self._dialect.jobs} "
            "WHERE status IN ('queued', 'running') ORDER BY seq",
            (),
        )
        return [unsettled_from(r) for r in rows]

    def open_attempts(self) -> list[OpenAttempt]:
        rows = self._select(
            f"SELECT job_id, number, instance, started_at FROM {self._dialect.attempts} "
            "WHERE finished_at IS NULL",
            (),
        )
        return [OpenAttempt(*r) for r in rows]

    def settled(self, ids: Sequence[str]) -> dict[str, tuple[Job, JobResult]]:
        """The settled jobs among `ids`, with their results (attempts left out)."""
        out: dict[str, tuple[Job, JobResult]] = {}
        for among, args in self._among("id", ids):
            rows = self._select(
                f"SELECT spec, status, reason, failure_origin FROM {self._dialect.jobs} "
                f"WHERE {among} AND status IN ({_FINAL_LIST})",
                args,
            )
            for spec, status, reason, origin in rows:
                job = job_from_json(json.loads(spec))
                out[job.id] = (job, JobResult(job.id, JobStatus(status), reason, (), origin))
        return out

    def job(self, job_id: str) -> tuple[JobRow, dict[str, Any]] | None:
        rows = self._select(
            f"SELECT {JOB_COLUMNS}, spec FROM {self._dialect.jobs} WHERE id = ?", (job_id,)
        )
        if not rows:
            return None
        return JobRow(*rows[0][:-1]), json.loads(rows[0][-1])

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._select(
            f"SELECT {', '.join(_ATTEMPT_KEYS)}, facts FROM {self._dialect.attempts} "
            "WHERE job_id = ? ORDER BY number",
            (job_id,),
        )
        return [
            {**dict(zip(_ATTEMPT_KEYS, r[:-1], strict=True)), "facts": json.loads(r[-1])}
            for r in rows
        ]

    def ended_attempt(self, job_id: str, number: int) -> Attempt | None:
        """The attempt if its row was completed, else None."""
        rows = self._select(
            "SELECT started_at, finished_at, exit_code, failure, message, server, cost_usd, facts "
            f"FROM {self._dialect.attempts} "
            "WHERE job_id = ? AND number = ? AND finished_at IS NOT NULL",
            (job_id, number),
        )
        if not rows:
            return None
        began, ended, code, failure, message, server, cost, facts = rows[0]
        return Attempt(
            number, began, ended, code, failure_from(failure), message, server, cost,
            MappingProxyType(json.loads(facts)),
        )  # fmt: skip

    def jobs(self, status: str | None, after: int, limit: int) -> list[JobRow]:
        """A page of jobs in submission order, after sequence number `after`."""
        where = ["seq > ?"]  # seq, not OFFSET: a page costs the same anywhere
        args: list[Any] = [after]
        if status is not None:
            where, args = [*where, "status = ?"], [*args, status]
        rows = self._select(
            f"SELECT {JOB_COLUMNS}, spec FROM {self._dialect.jobs}{_where(where)} "
            "ORDER BY seq LIMIT ?",
            (*args, limit),
        )
        page = [JobRow(*r[:-1]) for r in rows]
        return [
            dataclasses.replace(row, continue_on_error=True) if _allows_failure(r) else row
            for row, r in zip(page, rows, strict=True)
        ]

    def counts(self) -> dict[str, int]:
        rows = self._select(
            f"SELECT status, count(*) FROM {self._dialect.jobs} GROUP BY status", ()
        )
        return _per_status(rows)

    def spend_since(self, since: float) -> float:
        """USD of attempts that ended at or after `since`."""
        rows = self._select(
            f"SELECT sum(cost_usd) FROM {self._dialect.attempts} WHERE finished_at >= ?", (since,)
        )
        return float(rows[0][0] or 0.0)

    def timing(self) -> dict[str, float]:
        """Sums and counts for the metrics: queue wait (submit to first start), run time."""
        wait = self._select(
            f"SELECT count(*), sum(first_started_at - submitted_at) FROM {self._dialect.jobs} "
            "WHERE first_started_at IS NOT NULL",
            (),
        )[0]
        run = self._select(
            "SELECT count(*), sum(finished_at - started_at), sum(cost_usd) "
            f"FROM {self._dialect.attempts} WHERE finished_at IS NOT NULL",
            (),
        )[0]
        return {
            "wait_count": float(wait[0]),
            "wait_sum": float(wait[1] or 0.0),
            "run_count": float(run[0]),
            "run_sum": float(run[1] or 0.0),
            "spend": float(run[2] or 0.0),
        }

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

    def idle_money(self, since_day: int, besides: str = "") -> list[tuple[int, str, float, float]]:
        """Idle money, (UTC day number, GPU model, USD, seconds), from `since_day` on, summed
        over the instances that recorded it (but `besides`), oldest first."""
        rows = self._select(
            f"SELECT day, gpu, sum(usd), sum(seconds) FROM {self._dialect.idle} "
            "WHERE day >= ? AND instance != ? GROUP BY day, gpu ORDER BY day, gpu",
            (since_day, besides),
        )
        return [(int(d), str(g), float(u or 0.0), float(s or 0.0)) for d, g, u, s in rows]

    # -- plumbing --------------------------------------------------------------------------

    def _among(self, column: str, values: Sequence[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """`column` is one of `values`, as (condition, its arguments), one for each statement."""
        distinct = list(dict.fromkeys(values))
        if self._dialect.arrays:
            yield f"{column} = ANY(?)", (distinct,)
            return
        for start in range(0, len(distinct), _MARKS_PER_STATEMENT):
            chunk = distinct[start : start + _MARKS_PER_STATEMENT]
            yield f"{column} IN ({', '.join('?' * len(chunk))})", tuple(chunk)

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


def placed_facts(facts: Mapping[str, str], usd_per_hour: float) -> str:
    """The facts column of an attempt where it was placed: what the backend said, but the
    workdir (a path on the instance's host, not a fact of the attempt), with the price."""
    shown = {k: v for k, v in facts.items() if k != "workdir"}
    shown.setdefault("usd_per_hour", f"{usd_per_hour:.4f}")
    return dumps(shown)


def unsettled_from(row: Sequence[Any]) -> Unsettled:
    """A row of JOB_COLUMNS and then `spec`. (The trust domain is in both, written together;
    a row from before either has the default in both.)"""
    return Unsettled(JobRow(*row[:-1]), job_from_json(json.loads(row[-1])))


def _where(clauses: Sequence[str]) -> str:
    return f" WHERE {' AND '.join(clauses)}" if clauses else ""


def _per_status(rows: Sequence[tuple[Any, ...]]) -> dict[str, int]:
    return {**dict.fromkeys(STATUSES, 0), **{str(s): int(n) for s, n in rows}}


def _allows_failure(row: Sequence[Any]) -> bool:
    """A row of JOB_COLUMNS then `spec`: does a failure of this job pass? Only a failed job's
    spec is parsed."""
    if row[4] not in ("failed", "timed_out", "error"):  # `status`, fifth of JOB_COLUMNS
        return False
    return bool(json.loads(row[-1]).get("continue_on_error"))
