"""The host history's SQLite half: a file `hosts.db` beside the ledger file. A file of its own,
not a table in the ledger, so that the action can carry it from run to run in `actions/cache`
without carrying another run's rentals (which `cleanup` would then chase)."""

from __future__ import annotations

from pathlib import Path

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS
from runner.stores.hosts.rows import HostHistory, HostHistoryError
from runner.stores.sqlite import SqliteRows

FILE_NAME = "hosts.db"
_BUSY_TIMEOUT_S = 10.0
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
    """The history in a SQLite file (parent folders made). Thread-safe."""

    def __init__(self, path: Path | str, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        damaged = (
            "it is only advice: move the file aside (or `clore-run hosts --clear`) to start afresh"
        )
        self._name(Path(path), "host history", HostHistoryError, damaged)
        self._open(MIGRATIONS, _BUSY_TIMEOUT_S)
        try:
            self.prune()
        except HostHistoryError:
            self.close()
            raise
