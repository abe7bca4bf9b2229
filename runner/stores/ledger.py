"""The rental ledger's interface, and `open_ledger` choosing its implementation from a target:
a path opens the SQLite file (runner/ledger.py), a `postgresql://` URL the shared database."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from runner.clock import SYSTEM_CLOCK, Clock
from runner.ledger import Ledger, Rental, State
from runner.stores.target import is_postgres_url, require_psycopg


class RentalLedger(Protocol):
    """One row per rental, written before any API call that can cost money."""

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
    ) -> int: ...

    def mark_create_sent(
        self, rental_id: int, sent_at: float, offset_s: tuple[float, float] | None
    ) -> None: ...

    def mark_create_answered(self, rental_id: int, answered_at: float) -> None: ...

    def set_order(self, rental_id: int, order_id: int) -> None: ...

    def set_state(self, rental_id: int, state: State, note: str = "") -> None: ...

    def unreleased(self, run_id: str | None = None) -> list[Rental]: ...

    def rentals(self, run_id: str) -> list[Rental]: ...

    def close(self) -> None: ...

    def __enter__(self) -> RentalLedger: ...

    def __exit__(self, *_exc: object) -> None: ...


def open_ledger(target: str | Path, *, clock: Clock = SYSTEM_CLOCK) -> RentalLedger:
    """The ledger at `target`: a SQLite file path, or a PostgreSQL URL."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.pg_ledger import PostgresLedger  # psycopg only when asked for

        return PostgresLedger(str(target), clock=clock)
    return Ledger(Path(target), clock=clock)


def ledger_exists(target: str | Path) -> bool:
    """False only for a ledger file that was never made (a database is always looked at)."""
    return is_postgres_url(target) or Path(target).exists()
