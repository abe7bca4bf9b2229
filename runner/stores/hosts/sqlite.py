"""The host history's SQLite half: a file `hosts.db` beside the ledger file. A file of its own,
not a table in the ledger, so that the action can carry it from run to run in `actions/cache`
without carrying another run's rentals (which `cleanup` would then chase)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS
from runner.stores import sqlite as sqlite_files
from runner.stores.hosts.rows import HostHistory, HostHistoryError
from runner.stores.sql import Execute

T = TypeVar("T")

FILE_NAME = "hosts.db"
_BUSY_TIMEOUT_S = 10.0
_KINDS = ", ".join(f"'{k}'" for k in EVENT_KINDS)
SCHEMA_VERSION = 1
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""CREATE TABLE host_events (
            host TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ({_KINDS})),
            at REAL NOT NULL,
            boot_s REAL,
            run_id TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX host_events_by_host ON host_events (host, at)",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SqliteHosts(HostHistory):
    """The history in a SQLite file (parent folders made). Thread-safe."""

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite_files.connect(self.path, _BUSY_TIMEOUT_S)
        try:
            with self._guard("open"):
                sqlite_files.prepare(
                    self._db,
                    MIGRATIONS,
                    SCHEMA_VERSION,
                    error=HostHistoryError,
                    name=f"host history {self.path}",
                )
            self.prune()
        except HostHistoryError:
            self._db.close()
            raise

    @property
    def where(self) -> str:
        return str(self.path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        with self._lock, self._guard(doing):
            return work(self._db.execute)

    def _guard(self, doing: str) -> AbstractContextManager[None]:
        return sqlite_files.failures_as(
            HostHistoryError,
            f"host history {self.path}",
            doing,
            "it is only advice: move the file aside (or `clore-run hosts --clear`) to start afresh",
        )
