"""The rental ledger's rows and rules, written once for both halves: the SQLite file
(runner/stores/ledger/sqlite.py) and the shared PostgreSQL database
(runner/stores/ledger/postgres.py). A half only says how it runs a transaction, how an insert
learns its id, and what its messages call it.

It is what `clore-run cleanup` reconciles with the marketplace's orders after a crash, so an
intent is written before any API call that can cost money, and every failure becomes a
LedgerError (exit 3) naming the store, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from runner import liveness
from runner.errors import InfrastructureError
from runner.stores.sql import Execute, RowStore

State = Literal["intent", "ordered", "running", "releasing", "released", "failed"]
STATES: tuple[State, ...] = get_args(State)
# `failed` is terminal like `released`, but only for an intent whose create made nothing.
_COLUMNS = (
    "id, run_id, job_id, server_id, order_id, state, created_at, updated_at, "
    "price_per_day, currency, usd_per_hour, note, create_sent_at, create_answered_at, "
    "api_offset_low_s, api_offset_high_s, image, spot, legacy, tag, owner"
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
    order_id: str | None  # the marketplace's id of the order, as text (None: not known yet)
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
    tag: int | None = None  # what the create asked `my_orders` to echo (None: no create sent)
    owner: str | None = None  # the process that recorded it (runner/liveness.py Holder.text)


@dataclass(frozen=True)
class VerdictRecord:
    """One ownership verdict on a rental, as written: when (unix seconds), on which order (None:
    no order was named), the verdict (e.g. "ours", "unproven", "not-ours", "nothing-created",
    "cancelled-on-purpose") and its reason in words."""

    rental_id: int
    at: float
    order_id: str | None
    verdict: str
    reason: str


class RentalLedger(RowStore):
    """The ledger's rows and rules, written once for both halves: a half gives what every
    `RowStore` half does (`_transact`, failures as LedgerError; `where`; `close`) and the
    insert of an intent (`_insert_intent`, which differs in how it learns the new id)."""

    def _insert_intent(self, values: dict[str, Any]) -> int:
        raise NotImplementedError

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
        return self._insert_intent(
            {
                "run_id": run_id,
                "job_id": job_id,
                "server_id": server_id,
                "state": "intent",
                "created_at": now,
                "updated_at": now,
                "price_per_day": price_per_day,
                "currency": currency,
                "usd_per_hour": usd_per_hour,
                "image": image,
                "spot": spot,
                "owner": _owner_text(),
            }
        )

    def mark_create_sent(
        self,
        rental_id: int,
        sent_at: float,
        offset_s: tuple[float, float] | None,
        *,
        tag: int | None = None,
    ) -> None:
        """The create is about to go out (call it right before the request, after any wait):
        from now on an order may exist. `offset_s` bounds the API's clock minus ours; `tag` is
        what the create asks `my_orders` to echo (a create sent again, after a refusal, has a
        new one). A cleanup beside the run that gave the intent up as `failed` is overruled:
        an order may come."""
        low, high = offset_s if offset_s is not None else (None, None)
        changed = self._update(
            "mark a create sent",
            "UPDATE rentals SET create_sent_at = ?, api_offset_low_s = ?, "
            "api_offset_high_s = ?, tag = ?, updated_at = ?, state = CASE WHEN state = 'failed' "
            "THEN 'intent' ELSE state END WHERE id = ?",
            (sent_at, low, high, tag, self._clock.time(), rental_id),
        )
        if changed == 0:
            raise KeyError(f"no rental {rental_id} in {self.where}")

    def mark_create_answered(self, rental_id: int, answered_at: float) -> None:
        """The create's answer (or failure) came back: an order it made is stamped before."""
        self._update(
            "mark a create answered",
            "UPDATE rentals SET create_answered_at = ?, updated_at = ? WHERE id = ?",
            (answered_at, self._clock.time(), rental_id),
        )

    def set_order(self, rental_id: int, order_id: str) -> None:
        """The order id is known. An `intent` (or a `failed` one: a cleanup running beside the
        run gave up on it too early) becomes `ordered`: an order id means a billed server."""
        changed = self._update(
            "record an order id",
            "UPDATE rentals SET order_id = ?, updated_at = ?, state = CASE WHEN state IN "
            "('intent', 'failed') THEN 'ordered' ELSE state END WHERE id = ?",
            (order_id, self._clock.time(), rental_id),
        )
        if changed == 0:
            raise KeyError(f"no rental {rental_id} in {self.where}")

    def set_state(self, rental_id: int, state: State, note: str = "") -> None:
        """Move a rental to `state`. `failed` is refused once an order id is known: it would
        hide a billed server from cleanup."""
        if state not in STATES:
            raise ValueError(f"unknown rental state {state!r}; one of {', '.join(STATES)}")
        guard = " AND order_id IS NULL" if state == "failed" else ""
        now = self._clock.time()

        def update(execute: Execute) -> tuple[int, bool]:
            changed = execute(
                f"UPDATE rentals SET state = ?, note = ?, updated_at = ? WHERE id = ?{guard}",
                (state, note, now, rental_id),
            ).rowcount
            if changed:
                return changed, True
            exists = execute("SELECT 1 FROM rentals WHERE id = ?", (rental_id,)).fetchone()
            return 0, exists is not None

        changed, exists = self._transact(f"mark a rental {state}", update)
        if not changed and not exists:
            raise KeyError(f"no rental {rental_id} in {self.where}")
        if not changed:
            raise ValueError(f"rental {rental_id} has an order: it cannot be marked failed")

    def record_verdict(
        self, rental_id: int, verdict: str, reason: str, order_id: str | None = None
    ) -> None:
        """Keep an ownership verdict and its reason. Appended, never overwritten: the row's
        `note` holds only the last word, and why an order was (not) taken for ours must stay."""
        self._update(
            "record a verdict",
            "INSERT INTO verdicts (rental_id, at, order_id, verdict, reason) "
            "VALUES (?, ?, ?, ?, ?)",
            (rental_id, self._clock.time(), order_id, verdict, reason),
        )

    # --- reads -----------------------------------------------------------------------------

    def verdicts(self, rental_id: int) -> list[VerdictRecord]:
        """Every verdict on `rental_id`, oldest first."""
        rows = self._transact(
            "read verdicts",
            lambda execute: execute(
                "SELECT rental_id, at, order_id, verdict, reason FROM verdicts "
                "WHERE rental_id = ? ORDER BY id",
                (rental_id,),
            ).fetchall(),
        )
        return [
            VerdictRecord(int(r[0]), float(r[1]), None if r[2] is None else str(r[2]), r[3], r[4])
            for r in rows
        ]

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

    # --- plumbing --------------------------------------------------------------------------

    def _update(self, doing: str, statement: str, args: tuple[Any, ...]) -> int:
        return self._transact(doing, lambda execute: execute(statement, args).rowcount)

    def _select(self, query: str, args: tuple[Any, ...]) -> list[Rental]:
        rows = self._transact("read rentals", lambda execute: execute(query, args).fetchall())
        return [_rental(tuple(row)) for row in rows]


def insert_statement(values: dict[str, Any]) -> str:
    """The INSERT of one row of `values` (column -> value) into rentals."""
    return f"INSERT INTO rentals ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})"


def _rental(row: tuple[Any, ...]) -> Rental:
    values = list(row)
    values[4] = None if values[4] is None else str(values[4])  # order_id
    values[-4] = None if values[-4] is None else bool(values[-4])  # spot (SQLite: 0 or 1)
    values[-3] = bool(values[-3])  # legacy
    values[-2] = None if values[-2] is None else int(values[-2])  # tag
    return Rental(*values)


def _owner_text() -> str | None:
    holder = liveness.current()
    return None if holder is None else holder.text()
