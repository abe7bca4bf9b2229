"""The host history's SQLite half: a file `hosts.db` beside the ledger file. A file of its own,
not a table in the ledger, so that the action can carry it from run to run in `actions/cache`
without carrying another run's rentals (which `cleanup` would then chase)."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS
from runner.stores.hosts.rows import HostHistory, HostHistoryError
from runner.stores.sql import Execute
from runner.stores.sqlite import SqliteRows

T = TypeVar("T")
FILE_NAME = "hosts.db"
_BUSY_TIMEOUT_S = 10.0
_STATEMENT_S = 5.0  # no statement on a month of host events takes near this
# Each migration spells its own kinds: a later list must not change what an old step made.
_KINDS_1 = "'up', 'never_up', 'ssh_failed', 'preempted'"
_KINDS = ", ".join(f"'{k}'" for k in EVENT_KINDS)
SCHEMA_VERSION = 2
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""CREATE TABLE host_events (
            host TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ({_KINDS_1})),
            at REAL NOT NULL,
            boot_s REAL,
            run_id TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX host_events_by_host ON host_events (host, at)",
    ),
    # 2: the image each event's order ran and its pull (online -> deployed), and the kinds
    # `slow` and `pulling`. SQLite cannot change a CHECK in place: the table is rebuilt.
    (
        f"""CREATE TABLE host_events_2 (
            host TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ({_KINDS})),
            at REAL NOT NULL,
            boot_s REAL,
            run_id TEXT NOT NULL DEFAULT '',
            image TEXT NOT NULL DEFAULT '',
            pull_s REAL
        )""",
        """INSERT INTO host_events_2 (host, kind, at, boot_s, run_id)
            SELECT host, kind, at, boot_s, run_id FROM host_events""",
        "DROP TABLE host_events",
        "ALTER TABLE host_events_2 RENAME TO host_events",
        "CREATE INDEX host_events_by_host ON host_events (host, at)",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SqliteHosts(SqliteRows, HostHistory):
    """The history in a SQLite file (parent folders made). Thread-safe.

    The file may come from the Actions cache, which a pull request's run can write: its schema
    is not trusted. Before any statement touches its rows, the file's schema must be exactly
    what our migrations make (no view, no trigger, no other table, the same CHECKs); a file
    that is not is set aside (`hosts.db.refused`) and a fresh one begun, said once. Every
    statement is bounded in time (a progress handler), and the rows are checked as read
    (rows.py)."""

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        damaged = (
            "it is only advice: move the file aside (or `clore-run hosts --clear`) to start afresh"
        )
        self._name(Path(path), "host history", HostHistoryError, damaged)
        why = untrusted_schema(self.path)
        if why is not None:
            set_aside(self.path)
            self.note(f"the host history {self.path} was set aside and begun afresh: {why}")
        self._open(MIGRATIONS, _BUSY_TIMEOUT_S)
        self._db.execute("PRAGMA trusted_schema = OFF")
        self._began = time.monotonic()
        self._db.set_progress_handler(self._too_long, 10_000)
        try:
            self.prune()
        except HostHistoryError:
            self.close()
            raise

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        def timed(execute: Execute) -> T:
            self._began = time.monotonic()  # a bound on a statement, not a clock the run reads
            return work(execute)

        return super()._transact(doing, timed)

    def _too_long(self) -> int:
        """Non-zero interrupts the statement: a file made to make a query slow (a huge table,
        a schema we did not make) must not hang a start."""
        return 1 if time.monotonic() - self._began > _STATEMENT_S else 0


def untrusted_schema(path: Path) -> str | None:
    """Why the file's schema is not one our migrations make (None: it is, or no file)."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            found = _schema(db)
    except sqlite3.OperationalError:
        return None  # busy or unreadable, not foreign: opening it fails with the file named
    except sqlite3.DatabaseError as exc:
        # Not a database, or a damaged one: the history is only advice and the Actions cache
        # (which a pull request's run can write) may have put it here, so it must not stop
        # every later run; set aside, it is still there to look at.
        return f"it is not a readable SQLite database ({exc})"
    except (sqlite3.Error, OSError, ValueError):
        return None  # opening it fails with the file named
    if version > SCHEMA_VERSION:
        return None  # a newer clore-run's: opening refuses it with its own words
    expected = _expected_schema(version)
    if found != expected:
        extra = sorted(f"{kind} {name}" for kind, name, _sql in found - expected)
        return "its schema is not clore-run's" + (f" ({', '.join(extra)})" if extra else "")
    return None


def set_aside(path: Path) -> None:
    """Move the file (and its WAL and shared-memory files) to `<name>.refused`."""
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            part.replace(path.with_name(path.name + ".refused" + suffix))


def _schema(db: sqlite3.Connection) -> set[tuple[str, str, str]]:
    rows = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return {
        (str(t), str(n), " ".join(str(q or "").split()))
        for t, n, q in rows
        if not str(n).startswith("sqlite_")
    }


@functools.cache
def _expected_schema(version: int) -> frozenset[tuple[str, str, str]]:
    """What our migrations make of a new file, up to `version`."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        for step in MIGRATIONS[:version]:
            for statement in step:
                db.execute(statement)
        return frozenset(_schema(db))
