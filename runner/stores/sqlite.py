"""How the stores' SQLite halves open their files: the rental ledger, the queue, the host history.

Each must be on disk before they answer (a rental intent before `create_order`; "queued" only
once stored), each is shared by threads and by a second process (`cleanup` beside a run), and
each must refuse a file from a newer clore-run rather than misread it. Their failures read
alike too: the store's own error (exit 3) naming the file, never a traceback.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from runner.errors import InfrastructureError
from runner.stores.sql import Execute, RowStore

T = TypeVar("T")


class NewerSchema(Exception):
    def __init__(self, found: int, known: int) -> None:
        super().__init__(f"schema version {found}, newer than this clore-run reads ({known})")
        self.found = found
        self.known = known


class WalRefused(Exception):
    def __init__(self, mode: object) -> None:
        super().__init__(f"SQLite refused WAL mode (got {mode!r})")
        self.mode = mode


class SqliteRows(RowStore):
    """A store's SQLite half, for every store: one file, one connection (autocommit) behind a
    lock shared by threads, every failure the store's error naming the file."""

    path: Path
    _db: sqlite3.Connection

    def _name(self, path: Path, what: str, error: type[InfrastructureError], damaged: str) -> None:
        """What the file is (`what` in messages) and its error, with the hint `damaged` where
        the file itself may be at fault; before anything is opened."""
        self.path = path
        self._what = what
        self._error = error
        self._damaged = damaged
        self._lock = threading.RLock()

    def _open(self, migrations: Sequence[Sequence[str]], busy_timeout_s: float) -> None:
        """Open the file (parent folders made) and bring its schema to len(migrations)."""
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = connect(self.path, busy_timeout_s)
        try:
            with self._guard("open"):
                prepare(
                    self._db,
                    migrations,
                    len(migrations),
                    error=self._error,
                    name=f"{self._what} {self.path}",
                )
        except self._error:
            self._db.close()
            raise

    @property
    def where(self) -> str:
        return str(self.path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        # Autocommit: each statement is its own transaction; the lock keeps threads apart.
        with self._lock, self._guard(doing):
            return work(self._db.execute)

    def _guard(self, doing: str) -> AbstractContextManager[None]:
        return failures_as(self._error, f"{self._what} {self.path}", doing, self._damaged)


def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """One connection for all threads (callers serialise with a lock), autocommit, and a busy
    timeout that waits out another process's write lock."""
    return sqlite3.connect(
        path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s
    )


@contextmanager
def failures_as(
    error: type[InfrastructureError], name: str, doing: str, damaged: str
) -> Iterator[None]:
    """SQLite's and the OS's errors inside as `error`: "`name`: cannot `doing`: why", with the
    hint `damaged` where the file itself may be at fault."""
    try:
        yield
    except sqlite3.Error as exc:
        raise error(f"{name}: cannot {doing}: {exc}", hint=damaged) from None
    except OSError as exc:
        raise error(f"{name}: cannot {doing}: {exc}") from None


def prepare(
    db: sqlite3.Connection,
    migrations: Sequence[Sequence[str]],
    version: int,
    *,
    error: type[InfrastructureError],
    name: str,
) -> None:
    """WAL and full sync on, and the schema brought to `version`: `migrations[n]` takes a file
    from version n to n + 1. The first read of the file is here, so a corrupt one fails here.
    A file of a newer clore-run, or one that refuses WAL, is an `error` naming `name`."""
    try:
        _prepare(db, migrations, version)
    except NewerSchema as exc:
        raise error(f"{name} has {exc}", hint="upgrade clore-run to read it") from None
    except WalRefused as exc:
        raise error(f"{name}: {exc}") from None


def _prepare(db: sqlite3.Connection, migrations: Sequence[Sequence[str]], version: int) -> None:
    found = _version(db)
    if found > version:
        raise NewerSchema(found, version)
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise WalRefused(mode)
    db.execute("PRAGMA synchronous = FULL")
    if found == version:
        return
    # All steps and the version bump in one write transaction; the version is read again
    # inside it, so two processes opening a new file at once migrate it once.
    db.execute("BEGIN IMMEDIATE")
    try:
        found = _version(db)
        if found > version:
            raise NewerSchema(found, version)
        for step in range(found, version):
            for statement in migrations[step]:
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {version}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # some errors roll back by themselves
            db.execute("ROLLBACK")
        raise


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])
