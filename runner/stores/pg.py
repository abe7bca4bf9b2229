"""How clore-run talks to PostgreSQL: one connection per store, every wait bounded, reconnects.

- Every session sets `lock_timeout`, `statement_timeout` and
  `idle_in_transaction_session_timeout`: a waiter gives up instead of hanging behind a stalled
  client, and the server itself ends a session that stalls inside a transaction, releasing
  its locks. Nothing owns work through a session (no session advisory lock): a dropped
  connection loses nothing but the transaction it was in.
- Autocommit, with explicit short transactions: a connection is never left inside one.
- A lost connection (server restarted, network cut) is reopened and the transaction run again,
  for up to `reconnect_s`. Callers make their transactions safe to run twice (a key that makes
  an insert idempotent, a guard that makes an update a no-op the second time): a COMMIT whose
  reply was lost may have landed.
- Migrations: one transaction per step, serialised by a transaction-scoped advisory lock and
  numbered per component in `clore_run_schema`, so five processes starting on an empty database
  at once migrate it once, and an older clore-run refuses a newer schema.
Every failure becomes the store's own error naming the database (password left out).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError
from runner.stores.sql import Cursor, Execute, RowStore
from runner.stores.target import libpq_password, redact_url

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]
_MIGRATION_LOCK = 0x636C6F7265  # any constant: the key of the transaction-scoped lock
# SQLSTATEs after which the same transaction may simply be run again.
_RETRY_AT_ONCE = ("40001", "40P01")  # serialization failure, deadlock
_GONE = ("57P01", "57P02", "57P03")  # admin/crash shutdown, cannot connect now


@dataclass(frozen=True)
class Timeouts:
    connect_s: int = 5
    lock_ms: int = 5_000  # behind another transaction's row lock (they last milliseconds)
    statement_ms: int = 15_000
    idle_in_transaction_ms: int = 15_000
    reconnect_s: float = 60.0  # a restart with crash recovery takes seconds


def lease_timeouts(ttl_s: float) -> Timeouts:
    """A lease heartbeat's: every wait at most a third of the ttl (three beats fit in a lease),
    so a beat held up by a lock or a lost connection gives up while later beats can still
    renew the lease in time."""
    third_ms = max(50, int(ttl_s * 1000 / 3))
    return Timeouts(
        connect_s=max(2, math.ceil(ttl_s / 3)),  # libpq rounds less than 2 s up to 2
        lock_ms=third_ms,
        statement_ms=third_ms,
        idle_in_transaction_ms=third_ms,
        reconnect_s=ttl_s / 3,
    )


class NewerSchema(Exception):
    pass


class _TryAgain(Exception):
    """One try of a transaction failed in a way another may not; `error` if none is left."""

    def __init__(self, error: InfrastructureError) -> None:
        super().__init__(str(error))
        self.error = error


class PgDatabase:
    """One connection to `url`, shared by threads behind a lock."""

    def __init__(
        self,
        url: str,
        *,
        what: str,
        error: type[InfrastructureError],
        timeouts: Timeouts | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.url = url
        self.what = what
        self.where = f"{what} {redact_url(url)}"
        self._error = error
        self.timeouts = timeouts or Timeouts()
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: Conn | None = None
        self.reconnects = 0
        with self._lock:
            self._connection("connect")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def beside(self, timeouts: Timeouts) -> PgDatabase:
        """Another connection to the same database, with waits of its own."""
        return PgDatabase(
            self.url, what=self.what, error=self._error, timeouts=timeouts, clock=self._clock
        )

    def run(self, doing: str, work: Callable[[Conn], T], *, one_statement: bool = False) -> T:
        """`work` in one transaction; run again on a fresh connection if the old one was lost
        (so `work` must be safe to repeat). Errors become the store's error.
        `one_statement`: `work` sends a single statement, which autocommit makes a transaction
        of its own, so no BEGIN and COMMIT go to the server: one round trip instead of three
        (a reservation is a hot path that many holders contend on)."""
        deadline = self._clock.now() + self.timeouts.reconnect_s
        delay = 0.05
        with self._lock:
            while True:
                try:
                    return self._try(doing, work, one_statement)
                except _TryAgain as again:
                    if self._clock.now() >= deadline:
                        raise again.error from None
                self._clock.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _try(self, doing: str, work: Callable[[Conn], T], one_statement: bool) -> T:
        """`work` once. _TryAgain when the connection failed, or the database failed in a way
        that running it again may cure; any other error is the answer."""
        try:
            conn = self._connection(doing)
        except self._error as exc:  # cannot connect (yet): the server may be restarting
            raise _TryAgain(exc) from None
        # Only the database's own errors are tried again: an error `work` raises itself is an
        # answer (a fenced write refused), and repeating it until the deadline only delays it.
        try:
            if one_statement:
                return work(conn)
            with conn.transaction():
                return work(conn)
        except psycopg.Error as exc:
            error = self._fail(doing, exc)
            if self._retryable(exc):
                raise _TryAgain(error) from None
            raise error from None

    @contextmanager
    def transaction(self, doing: str) -> Iterator[Conn]:
        """One transaction around several writes, the connection held for it (other threads
        wait). Not run again after a lost connection: the error goes to the caller."""
        with self._lock:
            conn = self._connection(doing)
            try:
                with conn.transaction():
                    yield conn
            except psycopg.Error as exc:
                raise self._fail(doing, exc) from None

    def migrate(self, component: str, migrations: Sequence[Sequence[str]]) -> None:
        """Bring `component`'s tables to version len(migrations), one step per transaction.
        If that fails the connection is closed: a store whose tables are not up to date is not
        used, so its constructor has nothing to give back."""

        def step(conn: Conn) -> bool:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS clore_run_schema "
                "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            row = conn.execute(
                "SELECT version FROM clore_run_schema WHERE component = %s", (component,)
            ).fetchone()
            found = int(row[0]) if row else 0
            if found > len(migrations):
                raise NewerSchema(
                    f"{component} schema version {found}, newer than this clore-run reads "
                    f"({len(migrations)})"
                )
            if found == len(migrations):
                return True
            for statement in migrations[found]:
                conn.execute(statement.encode())
            conn.execute(
                "INSERT INTO clore_run_schema (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (component, found + 1),
            )
            return False

        try:
            while not self.run(f"migrate the {component} tables", step):
                pass
        except NewerSchema as exc:
            self.close()
            raise self._error(f"{self.where}: {exc}", hint="upgrade clore-run to use it") from None
        except BaseException:
            self.close()
            raise

    # -- plumbing ----------------------------------------------------------------------------

    def _connection(self, doing: str) -> Conn:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self.reconnects += 1
        t = self.timeouts
        try:
            conn = psycopg.connect(
                with_password(self.url),
                autocommit=True,
                connect_timeout=t.connect_s,
                application_name="clore-run",
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
            conn.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('statement_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('TimeZone', 'UTC', false)",
                (f"{t.lock_ms}ms", f"{t.statement_ms}ms", f"{t.idle_in_transaction_ms}ms"),
            )
        except psycopg.OperationalError as exc:
            then = "" if doing == "connect" else f"cannot {doing}: "
            raise self._error(
                f"{self.where}: {then}cannot connect: {connect_words(exc)}",
                hint="is the server up and the URL right?",
            ) from None
        self._conn = conn
        return conn

    def _retryable(self, exc: psycopg.Error) -> bool:
        if exc.sqlstate in _RETRY_AT_ONCE or exc.sqlstate in _GONE:
            return True
        if isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.QueryCanceled)):
            return False
        lost = self._conn is None or self._conn.closed or self._conn.broken
        return lost or (exc.sqlstate or "").startswith("08")

    def _fail(self, doing: str, exc: psycopg.Error) -> InfrastructureError:
        if isinstance(exc, pg_errors.LockNotAvailable):
            return self._error(
                f"{self.where}: cannot {doing}: waited {self.timeouts.lock_ms} ms for a lock",
                hint="another client holds it; the server ends a client stalled inside a "
                "transaction (idle_in_transaction_session_timeout), so try again",
            )
        if isinstance(exc, pg_errors.QueryCanceled):
            return self._error(
                f"{self.where}: cannot {doing}: it ran past {self.timeouts.statement_ms} ms",
                hint="the database is overloaded or a lock is held; try again",
            )
        return self._error(f"{self.where}: cannot {doing}: {_first_line(exc)}")


class PgRows(RowStore):
    """A store's PostgreSQL half, for every store whose rules are a `RowStore`: its statements
    run on `db`, each `_transact` one transaction, run again after a lost connection (so the
    rules make each safe to repeat)."""

    db: PgDatabase

    @property
    def where(self) -> str:
        return self.db.where

    def close(self) -> None:
        self.db.close()

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        def run(conn: Conn) -> T:
            def execute(statement: str, args: Sequence[Any]) -> Cursor:
                return conn.execute(marks(statement), args)

            return work(execute)

        return self.db.run(doing, run)


def marks(statement: str) -> bytes:
    """A statement written with `?` placeholders (the rules serve SQLite too) as psycopg's,
    `%s`; so no rule holds a literal `?` or `%`."""
    return statement.replace("?", "%s").encode()


class LeaseLine:
    """The connection a lease's heartbeats go over, apart from the store's other work.

    A store's connection is shared by its threads behind one lock. A statement on it that
    waits for another client's row lock (held by a client frozen inside a transaction until
    the server ends that session) would hold every heartbeat back for as long, and a lease
    shorter than that wait ran out while its holder was alive and well. Here each beat waits
    at most a third of the ttl, for a lock or a connection."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db
        self._line: PgDatabase | None = None
        self._ttl_s = 0.0
        self._lock = threading.Lock()

    def run(self, ttl_s: float, doing: str, work: Callable[[Conn], T]) -> T:
        """`work`, one statement, on the lease's own connection (opened at the first beat)."""
        with self._lock:
            if self._line is None or ttl_s != self._ttl_s:
                self._close()
                self._line = self._db.beside(lease_timeouts(ttl_s))
                self._ttl_s = ttl_s
            return self._line.run(doing, work, one_statement=True)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._line is not None:
            self._line.close()
            self._line = None


# libpq's reasons for a failed connection, in words (its text nests host, port and the socket's
# wording); a reason not listed here is shown as libpq's last clause.
_CONNECT_WORDS = (
    ("Connection refused", "connection refused"),
    ("failed to resolve host", "the host name does not resolve"),
    ("could not translate host name", "the host name does not resolve"),
    ("timeout expired", "no answer (timed out)"),
    ("Network is unreachable", "the network is unreachable"),
    ("No route to host", "no route to the host"),
    ("password authentication failed", "the password was refused"),
)


def with_password(url: str) -> str:
    """`url` as psycopg's connection string, with $PGPASSWORD added where libpq would have
    used it (see `libpq_password`)."""
    extra = libpq_password(url)
    return psycopg.conninfo.make_conninfo(url, **extra) if extra else url


def connect_words(exc: BaseException) -> str:
    """Why psycopg could not connect, in a few words: 'connection refused'."""
    text = _first_line(exc)
    for found, words in _CONNECT_WORDS:
        if found in text:
            return words
    return text.rsplit(": ", 1)[-1].strip() or text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
