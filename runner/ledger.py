"""The rental ledger: one SQLite row per rental, written before any API call that can cost money.

It is what `clore-run cleanup` reconciles with `my_orders` after a crash, so it must survive one:
- WAL mode with `synchronous=FULL`: each write is on disk when the call returns, so an intent
  recorded just before `create_order` is there after a `kill -9` or a lost VM. Writes are a few
  per rental, so an fsync each costs nothing that matters.
- `busy_timeout`: a run and a `cleanup` (two processes) may write at the same moment.
- One connection (`check_same_thread=False`) behind a lock, shared by the driver's worker threads:
  writes are single short statements that SQLite serialises anyway, and a single connection is
  one thing to close (per-thread connections would outlive threads nobody can close them from).
- `PRAGMA user_version` numbers the schema, so a later version can migrate an older file and an
  older clore-run refuses a newer file instead of misreading it.
Every SQLite failure becomes a LedgerError (exit 3) naming the file, never a traceback.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from runner import sqlite_files
from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError

DEFAULT_PATH = Path(".clore-run/ledger.db")
BUSY_TIMEOUT_MS = 10_000  # a cleanup beside a busy run waits, it does not fail

State = Literal["intent", "ordered", "running", "releasing", "released", "failed"]
STATES: tuple[State, ...] = get_args(State)
# `failed` is terminal like `released`, but only for an intent whose create made nothing.

SCHEMA_VERSION = 2
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
)
assert len(MIGRATIONS) == SCHEMA_VERSION

_COLUMNS = (
    "id, run_id, job_id, server_id, order_id, state, created_at, updated_at, "
    "price_per_day, currency, usd_per_hour, note, create_sent_at, create_answered_at, "
    "api_offset_low_s, api_offset_high_s, image, spot, legacy"
)


class LedgerError(InfrastructureError):
    """The ledger file cannot be opened, read or written."""


@dataclass(frozen=True)
class Rental:
    """One rental. Times are unix seconds; prices as the order has them (per day, `currency`)."""

    id: int
    run_id: str
    job_id: str
    server_id: int
    order_id: int | None
    state: State
    created_at: float
    updated_at: float
    price_per_day: float | None
    currency: str | None
    usd_per_hour: float | None
    note: str
    create_sent_at: float | None = None  # None: the create never went out
    create_answered_at: float | None = None  # None: no answer seen (or no create)
    api_offset_low_s: float | None = None  # the API's clock minus ours, at the send
    api_offset_high_s: float | None = None  # (None: not measured)
    image: str | None = None
    spot: bool | None = None
    legacy: bool = False  # written before creates were marked: nothing about it is provable


class Ledger:
    """The ledger at `path` (parent folders created). Thread-safe."""

    def __init__(self, path: Path | str = DEFAULT_PATH, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # `timeout` is SQLite's busy_timeout: wait out another process's write lock.
            self._db = sqlite_files.connect(self.path, BUSY_TIMEOUT_MS / 1000)
        try:
            with self._guard("open"):
                self._setup()
        except LedgerError:
            self._db.close()
            raise

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

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
        now = self._clock.time()
        with self._write("record an intent") as db:
            cursor = db.execute(
                "INSERT INTO rentals (run_id, job_id, server_id, state, created_at, updated_at, "
                "price_per_day, currency, usd_per_hour, image, spot) "
                "VALUES (?, ?, ?, 'intent', ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    job_id,
                    server_id,
                    now,
                    now,
                    price_per_day,
                    currency,
                    usd_per_hour,
                    image,
                    None if spot is None else int(spot),
                ),
            )
            rental_id = cursor.lastrowid
        assert rental_id is not None
        return rental_id

    def mark_create_sent(
        self, rental_id: int, sent_at: float, offset_s: tuple[float, float] | None
    ) -> None:
        """The create is about to go out (call it right before the request, after any wait):
        from now on an order may exist. `offset_s` bounds the API's clock minus ours. A cleanup
        beside the run that gave the intent up as `failed` is overruled: an order may come."""
        low, high = offset_s if offset_s is not None else (None, None)
        with self._write("mark a create sent") as db:
            cursor = db.execute(
                "UPDATE rentals SET create_sent_at = ?, api_offset_low_s = ?, "
                "api_offset_high_s = ?, updated_at = ?, state = CASE WHEN state = 'failed' "
                "THEN 'intent' ELSE state END WHERE id = ?",
                (sent_at, low, high, self._clock.time(), rental_id),
            )
            if cursor.rowcount == 0:
                raise KeyError(f"no rental {rental_id} in {self.path}")

    def mark_create_answered(self, rental_id: int, answered_at: float) -> None:
        """The create's answer (or failure) came back: an order it made is stamped before."""
        with self._write("mark a create answered") as db:
            db.execute(
                "UPDATE rentals SET create_answered_at = ?, updated_at = ? WHERE id = ?",
                (answered_at, self._clock.time(), rental_id),
            )

    def set_order(self, rental_id: int, order_id: int) -> None:
        """The order id is known. An `intent` (or a `failed` one: a cleanup running beside the
        run gave up on it too early) becomes `ordered`: an order id means a billed server."""
        with self._write("record an order id") as db:
            cursor = db.execute(
                "UPDATE rentals SET order_id = ?, updated_at = ?, state = CASE WHEN state IN "
                "('intent', 'failed') THEN 'ordered' ELSE state END WHERE id = ?",
                (order_id, self._clock.time(), rental_id),
            )
            if cursor.rowcount == 0:
                raise KeyError(f"no rental {rental_id} in {self.path}")

    def set_state(self, rental_id: int, state: State, note: str = "") -> None:
        """Move a rental to `state`. `failed` is refused once an order id is known: it would
        hide a billed server from cleanup."""
        if state not in STATES:
            raise ValueError(f"unknown rental state {state!r}; one of {', '.join(STATES)}")
        guard = " AND order_id IS NULL" if state == "failed" else ""
        with self._write(f"mark a rental {state}") as db:
            cursor = db.execute(
                f"UPDATE rentals SET state = ?, note = ?, updated_at = ? WHERE id = ?{guard}",
                (state, note, self._clock.time(), rental_id),
            )
            if cursor.rowcount == 0:
                exists = db.execute("SELECT 1 FROM rentals WHERE id = ?", (rental_id,)).fetchone()
                if not exists:
                    raise KeyError(f"no rental {rental_id} in {self.path}")
                raise ValueError(f"rental {rental_id} has an order: it cannot be marked failed")

    # --- reads -----------------------------------------------------------------------------

    def unreleased(self, run_id: str | None = None) -> list[Rental]:
        """Rentals not yet `released` or `failed` (of one run, or all), oldest first."""
        query = f"SELECT {_COLUMNS} FROM rentals WHERE state NOT IN ('released', 'failed')"
        args: tuple[Any, ...] = ()
        if run_id is not None:
            query, args = query + " AND run_id = ?", (run_id,)
        return self._select(query + " ORDER BY id", args)

    def rentals(self, run_id: str) -> list[Rental]:
        """Every rental of `run_id`, oldest first."""
        return self._select(
            f"SELECT {_COLUMNS} FROM rentals WHERE run_id = ? ORDER BY id", (run_id,)
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- plumbing --------------------------------------------------------------------------

    def _setup(self) -> None:
        try:
            sqlite_files.prepare(self._db, MIGRATIONS, SCHEMA_VERSION)
        except sqlite_files.NewerSchema as exc:
            raise LedgerError(
                f"ledger {self.path} has {exc}", hint="upgrade clore-run to read it"
            ) from None
        except sqlite_files.WalRefused as exc:
            raise LedgerError(f"ledger {self.path}: {exc}") from None

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise LedgerError(
                f"ledger {self.path}: cannot {doing}: {exc}",
                hint="if the file is damaged, move it aside; the rentals it lists may still be "
                "billed: check your orders on clore.ai",
            ) from None
        except OSError as exc:
            raise LedgerError(f"ledger {self.path}: cannot {doing}: {exc.strerror}") from None

    @contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guard(doing):
            yield self._db

    def _select(self, query: str, args: tuple[Any, ...]) -> list[Rental]:
        with self._lock, self._guard("read rentals"):
            rows = self._db.execute(query, args).fetchall()
        return [_rental(row) for row in rows]


def _rental(row: tuple[Any, ...]) -> Rental:
    values = list(row)
    values[-2] = None if values[-2] is None else bool(values[-2])  # spot
    values[-1] = bool(values[-1])  # legacy
    return Rental(*values)
