"""The host history: what each marketplace host did when a run rented it, across runs.

One row per event (`up` with its create -> SSH seconds, `never_up`, `ssh_failed`, `preempted`);
the pure rules that read them are runner/core/hosts.py. It lives beside the ledger: a SQLite
file `hosts.db` next to the ledger file, or a table in the same PostgreSQL database. A file of
its own, not a table in the ledger, so that the action can carry it from run to run in
`actions/cache` without carrying another run's rentals (which `cleanup` would then chase).

The history is advice, not a record of money: a write that fails is reported and dropped (a
run does not stop because it could not remember a host), and a file that cannot be read is an
empty history. Rows older than `KEEP_S` are dropped when the store opens, so it stays small.

The rows and their rules (`HostHistory`, runner/stores/host_history.py) are written once for
both stores, as the ledger's are: a store says how it runs a statement and what its messages
call it. This module is the SQLite store and the factory that picks one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

from runner import sqlite_files
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS, HostMemory
from runner.ledger import Execute
from runner.stores.host_history import KEEP_S, HostHistory, HostHistoryError
from runner.stores.target import is_postgres_url, require_psycopg

T = TypeVar("T")

__all__ = [
    "FILE_NAME",
    "KEEP_S",
    "HostFile",
    "HostHistory",
    "HostHistoryError",
    "hosts_target",
    "open_hosts",
    "read_memory",
]

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


class HostFile(HostHistory):
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


def hosts_target(ledger: str | Path) -> str | Path:
    """Where the host history of a ledger lives: beside its file, or in its database."""
    if is_postgres_url(ledger):
        return ledger
    return Path(ledger).parent / FILE_NAME


def open_hosts(target: str | Path, *, clock: Clock = SYSTEM_CLOCK) -> HostHistory:
    """The host history at `target`: a SQLite file path, or a PostgreSQL URL."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.pg_hosts import PostgresHosts  # psycopg only when asked for

        return PostgresHosts(str(target), clock=clock)
    return HostFile(Path(target), clock=clock)


def read_memory(target: str | Path, *, clock: Clock = SYSTEM_CLOCK) -> tuple[HostMemory, str]:
    """The history as of now (empty when none was written yet: no file is made for a look),
    and a note for a person when it could not be read (advice: the look goes on without it)."""
    if not is_postgres_url(target) and not Path(target).exists():
        return HostMemory(now=clock.time()), ""
    try:
        with open_hosts(target, clock=clock) as history:
            return history.memory(), ""
    except HostHistoryError as exc:
        return HostMemory(now=clock.time()), f"the host history was not read: {exc}"
