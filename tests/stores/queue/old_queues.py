"""A queue as an older clore-run left it: the first migrations of each half only, holding one
queued job, `s1.a`. What a migration's "existing queues keep their jobs" tests start from."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg

from runner.stores.pg import PgDatabase
from runner.stores.queue import QueueError
from runner.stores.queue import postgres as pg_half
from runner.stores.queue import sqlite as sqlite_half
from runner.stores.sqlite import prepare

SPEC = '{"id": "s1.a", "run": "true"}'


def queue_from_before(
    target: str, sqlite_steps: int, pg_steps: int, trust: str | None = None
) -> None:
    """`target` (a SQLite path or a postgresql:// URL) made by that half's first steps; its
    job of domain `trust` (None: written before the trust column existed)."""
    columns, values = ("", "") if trust is None else (", trust", f", '{trust}'")
    if target.startswith("postgresql:"):
        _old_postgres(target, pg_steps, columns, values)
    else:
        _old_sqlite(Path(target), sqlite_steps, columns, values)


def _old_sqlite(path: Path, steps: int, columns: str, values: str) -> None:
    old = sqlite_half.MIGRATIONS[:steps]
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        prepare(db, old, len(old), error=QueueError, name="old queue")
        db.execute("INSERT INTO submissions (kind, label, submitted_at) VALUES ('job', 'j', 1)")
        db.execute(
            f"INSERT INTO jobs (id, submission, name, spec, status, priority, submitted_at"
            f"{columns}) VALUES ('s1.a', 1, 'a', '{SPEC}', 'queued', 'normal', 1{values})"
        )


def _old_postgres(url: str, steps: int, columns: str, values: str) -> None:
    PgDatabase(url, what="queue database", error=QueueError).migrate(
        "queue", pg_half.MIGRATIONS[:steps]
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO queue_submissions (key, kind, label, submitted_at) "
            "VALUES ('k', 'job', 'j', 1)"
        )
        conn.execute(
            f"INSERT INTO queue_jobs (id, submission, name, spec, status, priority, rank, "
            f"submitted_at{columns}) VALUES ('s1.a', 1, 'a', '{SPEC}', 'queued', 'normal', 1, 1"
            f"{values})"
        )
