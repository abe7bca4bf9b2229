"""The rental ledger's SQLite half: one row per rental in a file, written before any API call
that can cost money.

It is what `clore-run cleanup` reconciles with the marketplace's orders after a crash, so it
must survive one:
- WAL mode with `synchronous=FULL`: each write is on disk when the call returns, so an intent
  recorded just before the create is there after a `kill -9` or a lost VM. Writes are a few
  per rental, so an fsync each costs nothing that matters.
- `busy_timeout`: a run and a `cleanup` (two processes) may write at the same moment.
- One connection (`check_same_thread=False`) behind a lock, shared by the driver's worker threads:
  writes are single short statements that SQLite serialises anyway, and a single connection is
  one thing to close (per-thread connections would outlive threads nobody can close them from).
- `PRAGMA user_version` numbers the schema, so a later version can migrate an older file and an
  older clore-run refuses a newer file instead of misreading it.
Every SQLite failure becomes a LedgerError (exit 3) naming the file, never a traceback. The rows
and their rules are runner/stores/ledger/rows.py, written once for both halves.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from runner.clock import SYSTEM_CLOCK, Clock
from runner.stores.ledger.rows import STATES, LedgerError, RentalLedger, insert_statement
from runner.stores.sqlite import SqliteRows

DEFAULT_PATH = Path(".clore-run/ledger.db")
BUSY_TIMEOUT_MS = 10_000  # a cleanup beside a busy run waits, it does not fail
_DAMAGED = (
    "if the file is damaged, move it aside; the rentals it lists may still be billed: check "
    "your orders on clore.ai"
)

SCHEMA_VERSION = 5
# Every column of version 3, as the fourth step copies them (a migration never changes, so it
# names its own columns, not the rules' list of today).
_V3_COLUMNS = (
    "id, run_id, job_id, server_id, order_id, state, created_at, updated_at, price_per_day, "
    "currency, usd_per_hour, note, create_sent_at, create_answered_at, api_offset_low_s, "
    "api_offset_high_s, image, spot, legacy, tag, owner"
)
# MIGRATIONS[n] takes a file from user_version n to n + 1. Append, never edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""CREATE TABLE rentals (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            server_id INTEGER NOT NULL,
            order_id INTEGER,
            state TEXT NOT NULL CHECK (state IN {STATES!r}),
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            price_per_day REAL,
            currency TEXT,
            usd_per_hour REAL,
            note TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX rentals_by_run ON rentals (run_id)",
        "CREATE INDEX rentals_open ON rentals (state) WHERE state NOT IN ('released', 'failed')",
    ),
    # Ownership marks: when the create was sent and answered (our clock), the clock offset to
    # the API measured then, and what the order was asked to be (the API echoes these back).
    # Rows from before have none of it (`legacy`): their orders cannot be proven ours.
    (
        "ALTER TABLE rentals ADD COLUMN create_sent_at REAL",
        "ALTER TABLE rentals ADD COLUMN create_answered_at REAL",
        "ALTER TABLE rentals ADD COLUMN api_offset_low_s REAL",
        "ALTER TABLE rentals ADD COLUMN api_offset_high_s REAL",
        "ALTER TABLE rentals ADD COLUMN image TEXT",
        "ALTER TABLE rentals ADD COLUMN spot INTEGER",
        "ALTER TABLE rentals ADD COLUMN legacy INTEGER NOT NULL DEFAULT 0",
        "UPDATE rentals SET legacy = 1",
    ),
    # The create's tag (the proof that an order is its own: see backends/clore/ownership.py)
    # and the process that recorded the intent (runner/liveness.py: a cleanup on the same host
    # leaves the rentals of a run still running alone). Older rows have neither: a create sent
    # without a tag proves no order its own.
    (
        "ALTER TABLE rentals ADD COLUMN tag INTEGER",
        "ALTER TABLE rentals ADD COLUMN owner TEXT",
    ),
    # Order ids as text: the ledger is every marketplace's, and an order id need not be a
    # number (Clore's are: they become their decimal text). SQLite cannot change a column's
    # type, so the table is made anew (no ALTER TABLE DROP COLUMN: SQLite before 3.35 lacks it).
    (
        f"""CREATE TABLE rentals_v4 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            server_id INTEGER NOT NULL,
            order_id TEXT,
            state TEXT NOT NULL CHECK (state IN {STATES!r}),
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            price_per_day REAL,
            currency TEXT,
            usd_per_hour REAL,
            note TEXT NOT NULL DEFAULT '',
            create_sent_at REAL,
            create_answered_at REAL,
            api_offset_low_s REAL,
            api_offset_high_s REAL,
            image TEXT,
            spot INTEGER,
            legacy INTEGER NOT NULL DEFAULT 0,
            tag INTEGER,
            owner TEXT
        )""",
        f"INSERT INTO rentals_v4 ({_V3_COLUMNS}) "
        f"SELECT {_V3_COLUMNS.replace('order_id', 'CAST(order_id AS TEXT)')} FROM rentals",
        "DROP TABLE rentals",
        "ALTER TABLE rentals_v4 RENAME TO rentals",
        "CREATE INDEX rentals_by_run ON rentals (run_id)",
        "CREATE INDEX rentals_open ON rentals (state) WHERE state NOT IN ('released', 'failed')",
    ),
    # Ownership verdicts, each kept: a row's `note` says only its last word, and an order we
    # could not prove ours (or gave up on, or cancelled on purpose) must keep every reason why.
    (
        """CREATE TABLE verdicts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            rental_id INTEGER NOT NULL,
            at REAL NOT NULL,
            order_id TEXT,
            verdict TEXT NOT NULL,
            reason TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX verdicts_by_rental ON verdicts (rental_id)",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SqliteLedger(SqliteRows, RentalLedger):
    """The ledger at `path` (parent folders created). Thread-safe."""

    def __init__(
        self,
        path: Path | str = DEFAULT_PATH,
        *,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
    ) -> None:
        self._clock = clock
        self._name(Path(path), "ledger", LedgerError, _DAMAGED)
        if read_only:
            self._db = self._open_read_only()
            return
        self._open(MIGRATIONS, BUSY_TIMEOUT_MS / 1000)

    def _insert_intent(self, values: dict[str, Any]) -> int:
        with self._lock, self._guard("record an intent"):
            rental_id = self._db.execute(insert_statement(values), tuple(values.values())).lastrowid
        assert rental_id is not None
        return rental_id

    def _open_read_only(self) -> sqlite3.Connection:
        """For a look that must write nothing (`cleanup --dry-run`, a ledger on a read-only
        disk or another user's): no folder made, no migration, no WAL switch. With no -wal file
        beside it the file is complete, and read as immutable (no lock or -shm file either)."""
        wal = self.path.with_name(self.path.name + "-wal")
        mode = "ro" if wal.exists() else "ro&immutable=1"
        uri = f"{self.path.resolve().as_uri()}?mode={mode}"
        with self._guard("open"):
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            try:
                found = db.execute("PRAGMA user_version").fetchone()[0]
            except BaseException:
                db.close()
                raise
        if found != SCHEMA_VERSION:
            db.close()
            raise LedgerError(
                f"ledger {self.path} has schema version {found}, this clore-run reads "
                f"{SCHEMA_VERSION}",
                hint="run it once without --dry-run to bring the file up to date",
            )
        return db
