"""The host history: what each marketplace host did when a run rented it, across runs.

One row per event (`up` with its create -> SSH seconds, `never_up`, `ssh_failed`, `preempted`);
the pure rules that read them are runner/core/hosts.py. It lives beside the ledger: a SQLite
file `hosts.db` next to the ledger file, or a table in the same PostgreSQL database. A file of
its own, not a table in the ledger, so that the action can carry it from run to run in
`actions/cache` without carrying another run's rentals (which `cleanup` would then chase).

The history is advice, not a record of money: a write that fails is reported and dropped (a
run does not stop because it could not remember a host), and a file that cannot be read is an
empty history. Rows older than `KEEP_S` are dropped when the store opens, so it stays small.

The rows and their rules (`HostHistory`) are written once for both stores, as the ledger's are:
a store says how it runs a statement and what its messages call it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from runner import sqlite_files
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS, HostEvent, HostMemory
from runner.errors import InfrastructureError
from runner.ledger import Execute
from runner.stores.target import is_postgres_url, require_psycopg

FILE_NAME = "hosts.db"
KEEP_S = 30 * 86400.0  # a host's month-old boots say little about it today
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
T = TypeVar("T")
_H = TypeVar("_H", bound="HostHistory")


class HostHistoryError(InfrastructureError):
    """The host history cannot be opened, read or written."""


class HostHistory:
    """The history's rows and rules, for every store: a store gives `_transact` (statements
    with `?` placeholders as one unit, failures as HostHistoryError) and `where`."""

    _clock: Clock

    @property
    def where(self) -> str:
        raise NotImplementedError

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def record(self, event: HostEvent) -> None:
        """Remember one event of one host."""
        if event.kind not in EVENT_KINDS:
            raise ValueError(f"unknown host event {event.kind!r}; one of {', '.join(EVENT_KINDS)}")
        self._transact(
            "record a host event",
            lambda execute: execute(
                "INSERT INTO host_events (host, kind, at, boot_s, run_id) VALUES (?, ?, ?, ?, ?)",
                (event.host, event.kind, event.at, event.boot_s, event.run_id),
            ),
        )

    def events(self, host: str | None = None) -> list[HostEvent]:
        """Every event remembered (of one host), oldest first."""
        query = "SELECT host, kind, at, boot_s, run_id FROM host_events"
        args: tuple[Any, ...] = ()
        if host is not None:
            query, args = query + " WHERE host = ?", (host,)
        rows = self._transact(
            "read host events", lambda execute: execute(query + " ORDER BY at", args).fetchall()
        )
        return [HostEvent(str(h), k, float(at), b, str(r)) for h, k, at, b, r in rows]

    def memory(self) -> HostMemory:
        """The history as of now, for the rules of runner/core/hosts.py."""
        return HostMemory.of(self.events(), self._clock.time())

    def clear(self, host: str | None = None) -> int:
        """Forget one host (or every host); how many events went."""
        query, args = "DELETE FROM host_events", tuple[str, ...]()
        if host is not None:
            query, args = query + " WHERE host = ?", (host,)
        return int(self._transact("clear host events", lambda ex: ex(query, args).rowcount))

    def prune(self, older_than_s: float = KEEP_S) -> int:
        """Drop events older than `older_than_s`."""
        cut = self._clock.time() - older_than_s
        return int(
            self._transact(
                "prune host events",
                lambda ex: ex("DELETE FROM host_events WHERE at < ?", (cut,)).rowcount,
            )
        )


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
