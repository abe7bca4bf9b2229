"""`open_ledger` choosing the rental ledger's store from a target: a path opens the SQLite file
(runner/ledger.py), a `postgresql://` URL the shared database. Both are a `RentalLedger`, the
one class that holds the ledger's rules."""

from __future__ import annotations

from pathlib import Path

from runner.clock import SYSTEM_CLOCK, Clock
from runner.ledger import Ledger, RentalLedger
from runner.stores.target import is_postgres_url, require_psycopg

__all__ = ["RentalLedger", "ledger_exists", "open_ledger"]


def open_ledger(
    target: str | Path, *, clock: Clock = SYSTEM_CLOCK, read_only: bool = False
) -> RentalLedger:
    """The ledger at `target`: a SQLite file path, or a PostgreSQL URL. `read_only`: a SQLite
    file is opened so that nothing at all is written (a database server needs no such care)."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.pg_ledger import PostgresLedger  # psycopg only when asked for

        return PostgresLedger(str(target), clock=clock)
    return Ledger(Path(target), clock=clock, read_only=read_only)


def ledger_exists(target: str | Path) -> bool:
    """False only for a ledger file that was never made (a database is always looked at)."""
    return is_postgres_url(target) or Path(target).exists()
