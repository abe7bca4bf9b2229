"""The queue's SQLite half: every submission, job and attempt, so that a restart loses nothing.

As the rental ledger does (runner/stores/ledger/sqlite.py): WAL with `synchronous=FULL` (a
reply saying "queued" means the job is on disk), a busy timeout, `PRAGMA user_version` for the
schema, one connection behind a lock shared by the API threads and the scheduling loop. Every
SQLite failure becomes a QueueError (exit 3), never a traceback.

The reads are written once for this file and the shared PostgreSQL queue alike
(runner/stores/queue/rows.py); this store gives its table names and SQLite's words for them.

An attempt row is written when the attempt starts and completed when it ends: a row left open
by a dead server is how the next one knows what was interrupted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.core.model import DEFAULT_TRUST, Attempt, Job, JobResult
from runner.core.outcome import BAD as BAD_STATUSES
from runner.stores.queue.codec import dumps, job_to_json
from runner.stores.queue.rows import STATUSES, QueueDialect, QueueError, QueueReads, placed_facts
from runner.stores.sqlite import SqliteRows

BUSY_TIMEOUT_S = 10.0
SQLITE = QueueDialect(
    jobs="jobs",
    attempts="attempts",
    submissions="submissions",
    idle="idle_money",
    find="instr",
    day="CAST({} / 86400 AS INTEGER)",
    arrays=False,
)
SCHEMA_VERSION = 5
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
    # Dashboard sessions logged out before they expire: where every check reads them, so a
    # kept copy of the cookie stays dead after a restart.
    ("CREATE TABLE ended_sessions (nonce TEXT PRIMARY KEY, expires REAL NOT NULL)",),
    # A submission's trust domain on each of its jobs: a server is reused only within one.
    # Jobs queued before it are the default domain's.
    (f"ALTER TABLE jobs ADD COLUMN trust TEXT NOT NULL DEFAULT '{DEFAULT_TRUST}'",),
    # Idle money (what rented servers cost while they ran no job), so a restart shows and
    # budgets the day's figures it had: each instance's own totals, which it overwrites.
    (
        """CREATE TABLE idle_money (
            instance TEXT NOT NULL,
            day INTEGER NOT NULL,
            gpu TEXT NOT NULL,
            usd REAL NOT NULL,
            seconds REAL NOT NULL,
            PRIMARY KEY (instance, day, gpu)
        )""",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SqliteQueue(SqliteRows, QueueReads):
    """The queue database at `path` (parent folders created). Thread-safe."""

    _dialect = SQLITE

    def __init__(self, path: Path | str) -> None:
        self._batched = False  # inside batch(): writes join its one transaction
        damaged = "if the file is damaged, move it aside (queued jobs in it are lost)"
        self._name(Path(path), "queue database", QueueError, damaged)
        self._open(MIGRATIONS, BUSY_TIMEOUT_S)

    # -- instances -------------------------------------------------------------------------

    def begin_instance(self, token: str, pid: int, backend: str, now: float) -> None:
        with self._tx("record the server start") as db:
            db.execute(
                "INSERT INTO instances (token, pid, backend, started_at) VALUES (?, ?, ?, ?)",
                (token, pid, backend, now),
            )

    def stale_instances(self, besides: str) -> list[str]:
        rows = self._select(
            "SELECT token FROM instances WHERE stopped_at IS NULL AND token != ? ORDER BY rowid",
            (besides,),
        )
        return [str(r[0]) for r in rows]

    def end_instance(self, token: str, now: float) -> None:
        with self._tx("record the server stop") as db:
            db.execute("UPDATE instances SET stopped_at = ? WHERE token = ?", (now, token))

    # -- dashboard logouts -----------------------------------------------------------------

    def end_session(self, nonce: str, expires: float, now: float) -> None:
        with self._tx("record a logout") as db:
            db.execute("DELETE FROM ended_sessions WHERE expires <= ?", (now,))
            db.execute(
                "INSERT OR REPLACE INTO ended_sessions (nonce, expires) VALUES (?, ?)",
                (nonce, expires),
            )

    def session_ended(self, nonce: str) -> bool:
        return bool(self._select("SELECT 1 FROM ended_sessions WHERE nonce = ?", (nonce,)))

    # -- idle money ------------------------------------------------------------------------

    def record_idle(self, instance: str, rows: Sequence[tuple[int, str, float, float]]) -> None:
        """`instance`'s idle money totals, (UTC day number, GPU model, USD, seconds): each
        replaces what it recorded for that day and GPU before (so writing one twice is safe)."""
        with self._tx("record idle money") as db:
            db.executemany(
                "INSERT INTO idle_money (instance, day, gpu, usd, seconds) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (instance, day, gpu) DO UPDATE "
                "SET usd = excluded.usd, seconds = excluded.seconds",
                [(instance, day, gpu, usd, s) for day, gpu, usd, s in rows],
            )

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
                    "submitted_at, trust) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?)",
                    (job.id, number, job.name, dumps(job_to_json(job)), _prio(job), now, job.trust),
                )
                assert cursor.lastrowid is not None
                out.append((cursor.lastrowid, job))
        return out

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
        with self._tx("record where an attempt runs") as db:
            db.execute(
                "UPDATE attempts SET server = ?, facts = ? WHERE job_id = ? AND number = ? "
                "AND finished_at IS NULL",
                (server, placed_facts(facts, usd_per_hour), job_id, number),
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

    # -- plumbing --------------------------------------------------------------------------

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

    def _select(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._transact("read the queue", lambda execute: execute(query, args).fetchall())


def _prio(job: Job) -> str:
    return job.priority.name.lower()
