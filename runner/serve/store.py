"""The queue's SQLite store: every submission, job and attempt, so that a restart loses nothing.

As the rental ledger does (runner/ledger.py): WAL with `synchronous=FULL` (a reply saying
"queued" means the job is on disk), a busy timeout, `PRAGMA user_version` for the schema, one
connection behind a lock shared by the API threads and the scheduling loop. Every SQLite
failure becomes a StoreError (exit 3), never a traceback.

An attempt row is written when the attempt starts and completed when it ends: a row left open
by a dead server is how the next one knows what was interrupted.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runner import sqlite_files
from runner.core.model import Attempt, Job, JobResult, JobStatus
from runner.core.outcome import BAD as BAD_STATUSES
from runner.errors import InfrastructureError
from runner.serve.codec import dumps, failure_from, job_from_json, job_to_json

BUSY_TIMEOUT_S = 10.0
QUEUED, RUNNING = "queued", "running"
STATUSES = (QUEUED, RUNNING, *(s.value for s in JobStatus))
FINAL = tuple(s.value for s in JobStatus)

SCHEMA_VERSION = 2
MIGRATIONS: tuple[tuple[str, ...], ...] = (  # MIGRATIONS[n]: version n -> n + 1; append only
    (
        """CREATE TABLE submissions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            label TEXT NOT NULL,
            submitted_at REAL NOT NULL
        )""",
        f"""CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            submission INTEGER NOT NULL REFERENCES submissions (id),
            name TEXT NOT NULL,
            spec TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN {STATUSES!r}),
            priority TEXT NOT NULL,
            submitted_at REAL NOT NULL,
            first_started_at REAL,
            finished_at REAL,
            reason TEXT NOT NULL DEFAULT '',
            attempts INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            retries_used INTEGER NOT NULL DEFAULT 0,
            infra_used INTEGER NOT NULL DEFAULT 0,
            retry_at REAL
        )""",
        "CREATE INDEX jobs_by_status ON jobs (status, seq)",
        """CREATE TABLE attempts (
            job_id TEXT NOT NULL REFERENCES jobs (id),
            number INTEGER NOT NULL,
            instance TEXT NOT NULL,
            started_at REAL NOT NULL,
            finished_at REAL,
            exit_code INTEGER,
            failure TEXT,
            message TEXT NOT NULL DEFAULT '',
            server TEXT NOT NULL DEFAULT '',
            cost_usd REAL NOT NULL DEFAULT 0,
            facts TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (job_id, number)
        )""",
        "CREATE INDEX attempts_open ON attempts (instance) WHERE finished_at IS NULL",
        "CREATE INDEX attempts_by_end ON attempts (finished_at)",
        """CREATE TABLE instances (
            token TEXT PRIMARY KEY,
            pid INTEGER NOT NULL,
            backend TEXT NOT NULL,
            started_at REAL NOT NULL,
            stopped_at REAL
        )""",
    ),
    (
        # A failure's taint, as data: the failed job a settled one descends from ("" none).
        "ALTER TABLE jobs ADD COLUMN failure_origin TEXT NOT NULL DEFAULT ''",
        f"""UPDATE jobs SET failure_origin = id
            WHERE status IN {tuple(s.value for s in BAD_STATUSES)!r}
            AND NOT coalesce(json_extract(spec, '$.continue_on_error'), 0)""",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION

_SUMMARY = (
    "seq, id, submission, name, status, priority, submitted_at, first_started_at, finished_at, "
    "reason, attempts, cost_usd, retries_used, infra_used, retry_at"
)


class StoreError(InfrastructureError):
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


class Store:
    """The queue database at `path` (parent folders created). Thread-safe."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._batched = False  # inside batch(): writes join its one transaction
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite_files.connect(self.path, BUSY_TIMEOUT_S)
        try:
            with self._lock, self._guard("open"):
                self._setup()
        except StoreError:
            self._db.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- instances -------------------------------------------------------------------------

    def begin_instance(self, token: str, pid: int, backend: str, now: float) -> None:
        with self._tx("record the server start") as db:
            db.execute(
                "INSERT INTO instances (token, pid, backend, started_at) VALUES (?, ?, ?, ?)",
                (token, pid, backend, now),
            )

    def end_instance(self, token: str, now: float) -> None:
        with self._tx("record the server stop") as db:
            db.execute("UPDATE instances SET stopped_at = ? WHERE token = ?", (now, token))

    # -- submissions -----------------------------------------------------------------------

    def submit(
        self, kind: str, label: str, make: Callable[[int], Sequence[Job]], now: float
    ) -> list[tuple[int, Job]]:
        """Record a submission; `make(number)` builds its jobs (their ids carry the number).
        One transaction: all of a submission's jobs are queued, or none."""
        with self._tx("queue the jobs") as db:
            cursor = db.execute(
                "INSERT INTO submissions (kind, label, submitted_at) VALUES (?, ?, ?)",
                (kind, label, now),
            )
            number = cursor.lastrowid
            assert number is not None
            out = []
            for job in make(number):
                cursor = db.execute(
                    "INSERT INTO jobs (id, submission, name, spec, status, priority, "
                    "submitted_at) VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                    (job.id, number, job.name, dumps(job_to_json(job)), _prio(job), now),
                )
                assert cursor.lastrowid is not None
                out.append((cursor.lastrowid, job))
        return out

    def known(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` name jobs in the store."""
        found: set[str] = set()
        for chunk in _chunks(list(dict.fromkeys(ids))):
            marks = ",".join("?" * len(chunk))
            rows = self._read(f"SELECT id FROM jobs WHERE id IN ({marks})", tuple(chunk))
            found.update(r[0] for r in rows)
        return found

    # -- what the scheduling loop writes ---------------------------------------------------

    def start_attempt(self, job_id: str, number: int, instance: str, now: float) -> None:
        with self._tx("record an attempt start") as db:
            db.execute(
                "INSERT OR REPLACE INTO attempts (job_id, number, instance, started_at) "
                "VALUES (?, ?, ?, ?)",
                (job_id, number, instance, now),
            )
            db.execute(
                "UPDATE jobs SET status = 'running', attempts = ?, retry_at = NULL, "
                "first_started_at = COALESCE(first_started_at, ?) WHERE id = ?",
                (number, now, job_id),
            )

    def place_attempt(
        self, job_id: str, number: int, server: str, facts: Mapping[str, str], usd_per_hour: float
    ) -> None:
        """Where a running attempt runs and at what price, until its end records the rest."""
        shown = {k: v for k, v in facts.items() if k != "workdir"}  # a local path: not a fact
        shown.setdefault("usd_per_hour", f"{usd_per_hour:.4f}")
        with self._tx("record where an attempt runs") as db:
            db.execute(
                "UPDATE attempts SET server = ?, facts = ? WHERE job_id = ? AND number = ? "
                "AND finished_at IS NULL",
                (server, dumps(shown), job_id, number),
            )

    def end_attempt(self, job_id: str, attempt: Attempt, *, requeue: bool = False) -> None:
        """Complete the attempt row. `requeue`: the job goes back to `queued` at once (a
        server shutting down hands its running jobs to the next start)."""
        with self._tx("record an attempt end") as db:
            db.execute(
                "UPDATE attempts SET finished_at = ?, exit_code = ?, failure = ?, message = ?, "
                "server = ?, cost_usd = ?, facts = ? WHERE job_id = ? AND number = ?",
                (
                    attempt.finished_at,
                    attempt.exit_code,
                    attempt.failure.value if attempt.failure else None,
                    attempt.message,
                    attempt.server,
                    attempt.cost_usd,
                    dumps(dict(attempt.facts)),
                    job_id,
                    attempt.number,
                ),
            )
            # A sum, not an increment: replaying an attempt after a crash must not bill it twice.
            status = ", status = 'queued'" if requeue else ""
            db.execute(
                "UPDATE jobs SET cost_usd = (SELECT coalesce(sum(cost_usd), 0) FROM attempts "
                f"WHERE job_id = ?){status} WHERE id = ?",
                (job_id, job_id),
            )

    def requeue(self, job_id: str, at: float, retries_used: int, infra_used: int) -> None:
        with self._tx("requeue a job") as db:
            db.execute(
                "UPDATE jobs SET status = 'queued', retry_at = ?, retries_used = ?, "
                "infra_used = ? WHERE id = ?",
                (at, retries_used, infra_used, job_id),
            )

    def settle(self, result: JobResult, now: float) -> None:
        with self._tx("settle a job") as db:
            db.execute(
                "UPDATE jobs SET status = ?, reason = ?, finished_at = ?, retry_at = NULL, "
                "failure_origin = ? WHERE id = ?",
                (result.status.value, result.reason, now, result.failure_origin, result.job_id),
            )

    # -- reads -----------------------------------------------------------------------------

    def unsettled(self) -> list[Unsettled]:
        """Jobs queued or running, in submission order."""
        rows = self._read(
            f"SELECT {_SUMMARY}, spec FROM jobs WHERE status IN ('queued', 'running') ORDER BY seq",
            (),
        )
        return [Unsettled(JobRow(*r[:-1]), job_from_json(json.loads(r[-1]))) for r in rows]

    def open_attempts(self) -> list[OpenAttempt]:
        rows = self._read(
            "SELECT job_id, number, instance, started_at FROM attempts WHERE finished_at IS NULL",
            (),
        )
        return [OpenAttempt(*r) for r in rows]

    def settled(self, ids: Sequence[str]) -> dict[str, tuple[Job, JobResult]]:
        """The settled jobs among `ids`, with their results (attempts left out)."""
        out: dict[str, tuple[Job, JobResult]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids))):
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT spec, status, reason, failure_origin FROM jobs WHERE id IN ({marks}) "
                f"AND status IN {FINAL!r}",
                tuple(chunk),
            )
            for spec, status, reason, origin in rows:
                job = job_from_json(json.loads(spec))
                out[job.id] = (job, JobResult(job.id, JobStatus(status), reason, (), origin))
        return out

    def job(self, job_id: str) -> tuple[JobRow, dict[str, Any]] | None:
        rows = self._read(f"SELECT {_SUMMARY}, spec FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            return None
        return JobRow(*rows[0][:-1]), json.loads(rows[0][-1])

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT number, instance, started_at, finished_at, exit_code, failure, message, "
            "server, cost_usd, facts FROM attempts WHERE job_id = ? ORDER BY number",
            (job_id,),
        )
        keys = (
            "number",
            "instance",
            "started_at",
            "finished_at",
            "exit_code",
            "failure",
            "message",
            "server",
            "cost_usd",
        )
        return [{**dict(zip(keys, r[:-1], strict=True)), "facts": json.loads(r[-1])} for r in rows]

    def ended_attempt(self, job_id: str, number: int) -> Attempt | None:
        """The attempt if its row was completed, else None."""
        rows = self._read(
            "SELECT started_at, finished_at, exit_code, failure, message, server, cost_usd, facts "
            "FROM attempts WHERE job_id = ? AND number = ? AND finished_at IS NOT NULL",
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
        args: list[Any]
        where, args = "seq > ?", [after]  # seq, not OFFSET: a page costs the same anywhere
        if status is not None:
            where, args = where + " AND status = ?", [*args, status]
        rows = self._read(
            f"SELECT {_SUMMARY} FROM jobs WHERE {where} ORDER BY seq LIMIT ?", (*args, limit)
        )
        return [JobRow(*r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._read("SELECT status, count(*) FROM jobs GROUP BY status", ())
        return {**dict.fromkeys(STATUSES, 0), **{s: n for s, n in rows}}

    def spend_since(self, since: float) -> float:
        """USD of attempts that ended at or after `since`."""
        rows = self._read("SELECT sum(cost_usd) FROM attempts WHERE finished_at >= ?", (since,))
        return float(rows[0][0] or 0.0)

    def timing(self) -> dict[str, float]:
        """Sums and counts for the metrics: queue wait (submit to first start), run time."""
        wait = self._read(
            "SELECT count(*), sum(first_started_at - submitted_at) FROM jobs "
            "WHERE first_started_at IS NOT NULL",
            (),
        )[0]
        run = self._read(
            "SELECT count(*), sum(finished_at - started_at), sum(cost_usd) FROM attempts "
            "WHERE finished_at IS NOT NULL",
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
        where, args = _matching(match)
        order = "ASC"
        if match.after is not None:
            where, args = [*where, "seq > ?"], [*args, match.after]
        if match.before is not None:
            where, args, order = [*where, "seq < ?"], [*args, match.before], "DESC"
        clause = " AND ".join(where) or "1"
        rows = self._read(
            f"SELECT {_SUMMARY}, spec FROM jobs WHERE {clause} ORDER BY seq {order} LIMIT ?",
            (*args, limit),
        )
        page = [(JobRow(*r[:-1]), json.loads(r[-1])) for r in rows]
        return page[::-1] if order == "DESC" else page

    def match_counts(self, match: JobMatch) -> dict[str, int]:
        """How many jobs of each status `match` (its status and paging ignored)."""
        where, args = _matching(JobMatch(name=match.name, submission=match.submission))
        clause = " AND ".join(where) or "1"
        rows = self._read(
            f"SELECT status, count(*) FROM jobs WHERE {clause} GROUP BY status", tuple(args)
        )
        return {**dict.fromkeys(STATUSES, 0), **{s: n for s, n in rows}}

    def submission(self, number: int) -> tuple[str, str, float] | None:
        """kind, label, submitted_at."""
        rows = self._read(
            "SELECT kind, label, submitted_at FROM submissions WHERE id = ?", (number,)
        )
        return (str(rows[0][0]), str(rows[0][1]), float(rows[0][2])) if rows else None

    def submission_attempts(self, number: int, limit: int) -> list[dict[str, Any]]:
        """The attempts of a submission's jobs (the first `limit`), for its timeline."""
        rows = self._read(
            "SELECT a.job_id, a.number, a.started_at, a.finished_at, a.failure "
            "FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.submission = ? "
            "ORDER BY a.started_at LIMIT ?",
            (number, limit),
        )
        keys = ("job_id", "number", "started_at", "finished_at", "failure")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def spend_by_day(self, since: float) -> list[tuple[float, float]]:
        """(UTC day start, USD) of the attempts that ended at or after `since`, by day."""
        rows = self._read(
            "SELECT CAST(finished_at / 86400 AS INTEGER) AS day, sum(cost_usd) FROM attempts "
            "WHERE finished_at >= ? GROUP BY day ORDER BY day",
            (since,),
        )
        return [(float(day) * 86400, float(usd or 0.0)) for day, usd in rows]

    # -- plumbing --------------------------------------------------------------------------

    def _setup(self) -> None:
        try:
            sqlite_files.prepare(self._db, MIGRATIONS, SCHEMA_VERSION)
        except sqlite_files.NewerSchema as exc:
            raise StoreError(
                f"queue database {self.path} has {exc}", hint="upgrade clore-run to read it"
            ) from None
        except sqlite_files.WalRefused as exc:
            raise StoreError(f"queue database {self.path}: {exc}") from None

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(
                f"queue database {self.path}: cannot {doing}: {exc}",
                hint="if the file is damaged, move it aside (queued jobs in it are lost)",
            ) from None
        except OSError as exc:
            raise StoreError(f"queue database {self.path}: cannot {doing}: {exc}") from None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The writes inside as one transaction: one sync to disk for a whole batch (a failure
        settling a 3,000-deep chain is one batch), all of it landing, or none."""
        with self._tx("record a batch of changes"):
            self._batched = True
            try:
                yield
            finally:
                self._batched = False

    @contextmanager
    def _tx(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it lands, or none."""
        with self._lock, self._guard(doing):
            if self._batched:
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _read(self, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock, self._guard("read the queue"):
            return self._db.execute(query, args).fetchall()


@dataclass(frozen=True)
class JobMatch:
    """Which jobs a dashboard page lists; None matches anything."""

    status: str | None = None
    name: str | None = None  # a case-insensitive substring of the name or the id
    submission: int | None = None
    after: int | None = None  # seq
    before: int | None = None  # seq


def _matching(match: JobMatch) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if match.status is not None:
        where, args = [*where, "status = ?"], [*args, match.status]
    if match.submission is not None:
        where, args = [*where, "submission = ?"], [*args, match.submission]
    if match.name:
        # instr, not LIKE: a user's % or _ is a character to find, not a wildcard.
        where.append("(instr(lower(name), lower(?)) > 0 OR instr(lower(id), lower(?)) > 0)")
        args += [match.name, match.name]
    return where, args


def _prio(job: Job) -> str:
    return job.priority.name.lower()


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """SQLite limits the number of `?` in one statement."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
