"""The host history's PostgreSQL half: the same rows and rules as `hosts.db` (the one
`HostHistory` of runner/stores/hosts/rows.py), in the coordinator's database, so that every
run and `serve` instance of an organisation learns from the others' boots."""

from __future__ import annotations

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EVENT_KINDS
from runner.stores.hosts.rows import KEEP_S, HostHistory, HostHistoryError
from runner.stores.pg import PgDatabase, PgRows, Timeouts

# Each migration spells its own kinds: a later list must not change what an old step made.
_KINDS_1 = "'up', 'never_up', 'ssh_failed', 'preempted'"
_KINDS = ", ".join(f"'{k}'" for k in EVENT_KINDS)
MIGRATIONS: tuple[tuple[str, ...], ...] = (  # MIGRATIONS[n]: version n -> n + 1; append only
    (
        f"""CREATE TABLE host_events (
            id BIGSERIAL PRIMARY KEY,
            host TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ({_KINDS_1})),
            at DOUBLE PRECISION NOT NULL,
            boot_s DOUBLE PRECISION,
            run_id TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX host_events_by_host ON host_events (host, at)",
    ),
    # 2: the image each event's order ran and its pull (online -> deployed), and the kinds
    # `slow` and `pulling` (the column's CHECK, named by PostgreSQL's rule, made anew).
    (
        "ALTER TABLE host_events DROP CONSTRAINT host_events_kind_check",
        f"ALTER TABLE host_events ADD CONSTRAINT host_events_kind_check CHECK (kind IN ({_KINDS}))",
        "ALTER TABLE host_events ADD COLUMN image TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE host_events ADD COLUMN pull_s DOUBLE PRECISION",
    ),
)


class PostgresHosts(PgRows, HostHistory):
    """The host history in the database at `url`. Thread-safe. An insert run twice after a
    lost connection leaves one event twice: advice, not money."""

    def __init__(
        self, url: str, *, clock: Clock = SYSTEM_CLOCK, timeouts: Timeouts | None = None
    ) -> None:
        self._clock = clock
        self.db = PgDatabase(url, what="host history", error=HostHistoryError, timeouts=timeouts)
        self.db.migrate("hosts", MIGRATIONS)
        self.prune(KEEP_S)
