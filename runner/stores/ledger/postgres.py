"""The rental ledger's PostgreSQL half: the same rows and rules as the SQLite file (the one
`RentalLedger` of runner/stores/ledger/rows.py), in a database that every machine of an
organisation can see, so that a reaper anywhere can cancel what a dead run left.

A write is committed before the call returns (the server's own durability), so an intent is on
disk before `create_order` is sent. Each write is one transaction, run again after a lost
connection: an intent carries a key of its own, so a repeated insert finds the first one.
"""

from __future__ import annotations

import uuid
from typing import Any

from runner.clock import SYSTEM_CLOCK, Clock
from runner.stores.ledger.rows import STATES, LedgerError, RentalLedger, insert_statement
from runner.stores.pg import PgDatabase, PgRows, Timeouts

_STATE_LIST = ", ".join(f"'{s}'" for s in STATES)
MIGRATIONS: tuple[tuple[str, ...], ...] = (  # MIGRATIONS[n]: version n -> n + 1; append only
    (
        f"""CREATE TABLE rentals (
            id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            run_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            server_id BIGINT NOT NULL,
            order_id BIGINT,
            state TEXT NOT NULL CHECK (state IN ({_STATE_LIST})),
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            price_per_day DOUBLE PRECISION,
            currency TEXT,
            usd_per_hour DOUBLE PRECISION,
            note TEXT NOT NULL DEFAULT '',
            create_sent_at DOUBLE PRECISION,
            create_answered_at DOUBLE PRECISION,
            api_offset_low_s DOUBLE PRECISION,
            api_offset_high_s DOUBLE PRECISION,
            image TEXT,
            spot BOOLEAN,
            legacy BOOLEAN NOT NULL DEFAULT false
        )""",
        "CREATE INDEX rentals_by_run ON rentals (run_id)",
        "CREATE INDEX rentals_open ON rentals (state) WHERE state NOT IN ('released', 'failed')",
    ),
    # As the SQLite file's third: the create's tag and the process that recorded the row.
    (
        "ALTER TABLE rentals ADD COLUMN tag BIGINT",
        "ALTER TABLE rentals ADD COLUMN owner TEXT",
    ),
    # As the SQLite file's fourth: order ids as text, the marketplace's own spelling of them.
    ("ALTER TABLE rentals ALTER COLUMN order_id TYPE TEXT USING order_id::text",),
    # As the SQLite file's fifth: every ownership verdict and its reason, kept.
    (
        """CREATE TABLE verdicts (
            id BIGSERIAL PRIMARY KEY,
            rental_id BIGINT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            order_id TEXT,
            verdict TEXT NOT NULL,
            reason TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX verdicts_by_rental ON verdicts (rental_id)",
    ),
)


class PostgresLedger(PgRows, RentalLedger):
    """The ledger in the database at `url`. Thread-safe; `clock` gives unix seconds."""

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        timeouts: Timeouts | None = None,
    ) -> None:
        self._clock = clock
        self.db = PgDatabase(url, what="ledger", error=LedgerError, timeouts=timeouts)
        self.db.migrate("ledger", MIGRATIONS)

    def _insert_intent(self, values: dict[str, Any]) -> int:
        # A key of its own, made once: the insert run again after a lost connection (its
        # COMMIT may have landed) finds the first row instead of making a second.
        keyed = {"key": uuid.uuid4().hex, **values}
        statement = insert_statement(keyed) + (
            " ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING id"
        )
        row = self._transact(
            "record an intent", lambda execute: execute(statement, tuple(keyed.values())).fetchone()
        )
        return int(row[0])
