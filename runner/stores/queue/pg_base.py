"""What both parts of the queue's PostgreSQL half stand on: the transaction of the batch open on
this thread (or one of its own), the queue's NOTIFY channel, and giving a stopping instance's
jobs back (a clean stop, a take-over)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from runner.stores.pg import Conn, PgDatabase, marks
from runner.stores.queue.rows import QueueReads

CHANNEL = "clore_run_queue"


class PgQueueBase(QueueReads):
    """The plumbing of PostgresQueue (runner/stores/queue/postgres.py), which opens `db`."""

    db: PgDatabase
    _batch: threading.local

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The writes inside as one transaction (on this thread), all of them or none."""
        if getattr(self._batch, "conn", None) is not None:
            yield
            return
        with self.db.transaction("record a batch of changes") as conn:
            self._batch.conn = conn
            try:
                yield
            finally:
                self._batch.conn = None

    # -- plumbing --------------------------------------------------------------------------

    def _run(self, doing: str, work: Callable[[Conn], None]) -> None:
        """`work` inside the open batch on this thread, else in a transaction of its own."""
        conn = getattr(self._batch, "conn", None)
        if conn is not None:
            work(conn)
        else:
            self.db.run(doing, work)

    def _write(self, doing: str, query: str, args: Sequence[Any] | Mapping[str, Any]) -> None:
        def write(conn: Conn) -> None:
            conn.execute(query.encode(), args)

        self._run(doing, write)

    def _select(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A read inside the open batch on this thread, else on its own. Placeholders are
        written `?` (QueueReads' statements serve SQLite too) and become psycopg's `%s`."""
        statement = marks(query)

        def read(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(statement, args).fetchall()

        conn: Conn | None = getattr(self._batch, "conn", None)
        return read(conn) if conn is not None else self.db.run("read the queue", read)


def _give_back(
    conn: Conn, which: str, args: Mapping[str, Any], finished_at: str
) -> tuple[list[str], list[int | None]]:
    """A clean stop's jobs (`which`, of this instance) back to everyone, as queued: except
    those a cancel was asked for, which are cancelled here (finished at `finished_at`).
    Given back with the request on them, another instance would claim such a job and start it
    again before its own pass of the requests cancelled it. The ids of those cancelled, and
    the pool slots of all of them, to release."""
    cancelled = conn.execute(
        "UPDATE queue_jobs SET status = 'cancelled', reason = 'cancelled by request', "
        f"finished_at = {finished_at}, retry_at = NULL, failure_origin = id "
        f"WHERE {which} AND cancel_requested AND status IN ('queued', 'running') "
        "RETURNING id, pool_slot",
        args,
    ).fetchall()
    given = conn.execute(
        "UPDATE queue_jobs SET status = 'queued', owner = NULL, claim = NULL "
        f"WHERE {which} AND status IN ('queued', 'running') RETURNING pool_slot",
        args,
    ).fetchall()
    if cancelled:
        conn.execute(f"NOTIFY {CHANNEL}")  # its dependents can be settled now
    slots = [r[1] for r in cancelled] + [r[0] for r in given]
    return [str(r[0]) for r in cancelled], slots


def _release(conn: Conn, slots: Sequence[int | None], by: str) -> None:
    """Give back the claims' server slots that are still held (none: no round trip)."""
    held = [slot for slot in slots if slot is not None]
    if held:
        conn.execute("SELECT clore_run_release_slots(%s, %s)", (held, by))
