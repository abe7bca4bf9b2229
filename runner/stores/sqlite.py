"""How the stores' SQLite halves open their files: the rental ledger, the queue, the host history.

Each must be on disk before they answer (a rental intent before `create_order`; "queued" only
once stored), each is shared by threads and by a second process (`cleanup` beside a run), and
each must refuse a file from a newer clore-run rather than misread it. Their failures read
alike too: the store's own error (exit 3) naming the file, never a traceback.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from runner.errors import InfrastructureError


class NewerSchema(Exception):
    def __init__(self, found: int, known: int) -> None:
        super().__init__(f"schema version {found}, newer than this clore-run reads ({known})")
        self.found = found
        self.known = known


class WalRefused(Exception):
    def __init__(self, mode: object) -> None:
        super().__init__(f"SQLite refused WAL mode (got {mode!r})")
        self.mode = mode


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
