"""The rental ledger: one row per rental, written before any API call that can cost money.

One interface, `RentalLedger` (its rows and rules: rows.py), with two halves: a SQLite file
(sqlite.py, the default: a path) and a PostgreSQL database (postgres.py: a `postgresql://` URL,
shared by machines). `open_ledger` picks the half a target names.
"""

from __future__ import annotations

from pathlib import Path

from runner.clock import SYSTEM_CLOCK, Clock
from runner.stores.ledger.rows import (
    STATES,
    LedgerError,
    Rental,
    RentalLedger,
    State,
    VerdictRecord,
)
from runner.stores.ledger.sqlite import DEFAULT_PATH, SqliteLedger
from runner.stores.target import is_postgres_url, require_psycopg

__all__ = [
    "DEFAULT_PATH",
    "STATES",
    "LedgerError",
    "Rental",
    "RentalLedger",
    "State",
    "VerdictRecord",
    "ledger_exists",
    "open_ledger",
]


def open_ledger(
    target: str | Path, *, clock: Clock = SYSTEM_CLOCK, read_only: bool = False
) -> RentalLedger:
    """The ledger at `target`: a SQLite file path, or a PostgreSQL URL. `read_only`: a SQLite
    file is opened so that nothing at all is written (a database server needs no such care)."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.ledger.postgres import PostgresLedger  # psycopg only when asked for

        return PostgresLedger(str(target), clock=clock)
    return SqliteLedger(Path(target), clock=clock, read_only=read_only)


def ledger_exists(target: str | Path) -> bool:
    """False only for a ledger file that was never made (a database is always looked at)."""
    return is_postgres_url(target) or Path(target).exists()
