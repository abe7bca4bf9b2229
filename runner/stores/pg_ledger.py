"""The rental ledger in PostgreSQL: the same rows and rules as the SQLite file (runner/ledger.py),
in a database that every machine of an organisation can see, so that a reaper anywhere can
cancel what a dead run left.

A write is committed before the call returns (the server's own durability), so an intent is on
disk before `create_order` is sent. Each write is one transaction, run again after a lost
connection: an intent carries a key of its own, so a repeated insert finds the first one.
"""

from __future__ import annotations

import uuid
from typing import Any

from runner.clock import SYSTEM_CLOCK, Clock
from runner.ledger import STATES, LedgerError, Rental, State
from runner.stores.pg import Conn, PgDatabase, Timeouts

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
)

_COLUMNS = (
    "id, run_id, job_id, server_id, order_id, state, created_at, updated_at, "
    "price_per_day, currency, usd_per_hour, note, create_sent_at, create_answered_at, "
    "api_offset_low_s, api_offset_high_s, image, spot, legacy"
)


class PostgresLedger:
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
        try:
            self.db.migrate("ledger", MIGRATIONS)
        except LedgerError:
            self.db.close()
            raise

    @property
    def where(self) -> str:
        return self.db.where

    def __enter__(self) -> PostgresLedger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    # --- writes ----------------------------------------------------------------------------

    def record_intent(
        self,
        run_id: str,
        job_id: str,
        server_id: int,
        price_per_day: float | None,
        currency: str | None,
        usd_per_hour: float | None,
        *,
        image: str | None = None,
        spot: bool | None = None,
    ) -> int:
        """Note that we are about to rent `server_id`. Call BEFORE `create_order` is sent."""
        now, key = self._clock.time(), uuid.uuid4().hex
        values = (key, run_id, job_id, server_id, now, now, price_per_day, currency, usd_per_hour)

        def insert(conn: Conn) -> int:
            row = conn.execute(
                "INSERT INTO rentals (key, run_id, job_id, server_id, state, created_at, "
                "updated_at, price_per_day, currency, usd_per_hour, image, spot) "
                "VALUES (%s, %s, %s, %s, 'intent', %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING id",
                (*values, image, spot),
            ).fetchone()
            assert row is not None
            return int(row[0])

        return self.db.run("record an intent", insert)

    def mark_create_sent(
        self, rental_id: int, sent_at: float, offset_s: tuple[float, float] | None
    ) -> None:
        """The create is about to go out: an order may exist from now on (a `failed` mark by
        a cleanup beside the run is overruled). `offset_s` bounds the API's clock minus ours."""
        low, high = offset_s if offset_s is not None else (None, None)
        now = self._clock.time()

        def update(conn: Conn) -> int:
            return conn.execute(
                "UPDATE rentals SET create_sent_at = %s, api_offset_low_s = %s, "
                "api_offset_high_s = %s, updated_at = %s, state = CASE WHEN state = 'failed' "
                "THEN 'intent' ELSE state END WHERE id = %s",
                (sent_at, low, high, now, rental_id),
            ).rowcount

        if self.db.run("mark a create sent", update) == 0:
            raise KeyError(f"no rental {rental_id} in {self.where}")

    def mark_create_answered(self, rental_id: int, answered_at: float) -> None:
        """The create's answer (or failure) came back."""
        now = self._clock.time()
        self.db.run(
            "mark a create answered",
            lambda conn: conn.execute(
                "UPDATE rentals SET create_answered_at = %s, updated_at = %s WHERE id = %s",
                (answered_at, now, rental_id),
            ),
        )

    def set_order(self, rental_id: int, order_id: int) -> None:
        """The order id is known: an `intent` (or `failed`) becomes `ordered`."""
        now = self._clock.time()

        def update(conn: Conn) -> int:
            return conn.execute(
                "UPDATE rentals SET order_id = %s, updated_at = %s, state = CASE WHEN state IN "
                "('intent', 'failed') THEN 'ordered' ELSE state END WHERE id = %s",
                (order_id, now, rental_id),
            ).rowcount

        if self.db.run("record an order id", update) == 0:
            raise KeyError(f"no rental {rental_id} in {self.where}")

    def set_state(self, rental_id: int, state: State, note: str = "") -> None:
        """Move a rental to `state`; `failed` is refused once an order id is known."""
        if state not in STATES:
            raise ValueError(f"unknown rental state {state!r}; one of {', '.join(STATES)}")
        guard = " AND order_id IS NULL" if state == "failed" else ""
        now = self._clock.time()

        def update(conn: Conn) -> tuple[int, bool]:
            changed = conn.execute(
                f"UPDATE rentals SET state = %s, note = %s, updated_at = %s WHERE id = %s{guard}",
                (state, note, now, rental_id),
            ).rowcount
            if changed:
                return changed, True
            exists = conn.execute("SELECT 1 FROM rentals WHERE id = %s", (rental_id,)).fetchone()
            return 0, exists is not None

        changed, exists = self.db.run(f"mark a rental {state}", update)
        if not changed and not exists:
            raise KeyError(f"no rental {rental_id} in {self.where}")
        if not changed:
            raise ValueError(f"rental {rental_id} has an order: it cannot be marked failed")

    # --- reads -----------------------------------------------------------------------------

    def unreleased(self, run_id: str | None = None) -> list[Rental]:
        """Rentals not yet `released` or `failed` (of one run, or all), oldest first."""
        query = f"SELECT {_COLUMNS} FROM rentals WHERE state NOT IN ('released', 'failed')"
        args: tuple[Any, ...] = ()
        if run_id is not None:
            query, args = query + " AND run_id = %s", (run_id,)
        return self._select(query + " ORDER BY id", args)

    def rentals(self, run_id: str) -> list[Rental]:
        """Every rental of `run_id`, oldest first."""
        return self._select(
            f"SELECT {_COLUMNS} FROM rentals WHERE run_id = %s ORDER BY id", (run_id,)
        )

    def _select(self, query: str, args: tuple[Any, ...]) -> list[Rental]:
        def read(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(query.encode(), args).fetchall()

        return [Rental(*row) for row in self.db.run("read rentals", read)]
