"""Budget pools in PostgreSQL (the words are in runner/stores/pools.py).

A reservation is one short transaction: lock the pool row (`FOR NO KEY UPDATE`: reservations
wait for each other, inserts that only reference the pool do not), lock the holder's
lease row (`FOR SHARE`: a reaper's takeover waits for it, so it sees every reservation made
under the old token), count the unsettled reservations from the rows themselves — expired but
not yet reaped ones included, their servers may still bill — and insert if it fits. Times are
the database's (`clore_run_now()`), never a client's: machines disagree, one database does not.
Every change is also numbered in `pool_events` under the pool lock, which makes the order of
commits visible to an audit (and to the test that replays it).

Reapers take expired leases with `FOR UPDATE SKIP LOCKED` (two reapers never take the same one,
and neither waits for the other) and give each a new fencing token.

Each transaction is safe to run twice (runner/stores/pg.py reruns it after a lost connection):
a reservation has a client-made key, a settle only touches an unsettled row.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from runner.stores.pg import Conn, PgDatabase, Timeouts
from runner.stores.pools import (
    Lease,
    LeaseLost,
    PoolError,
    PoolEvent,
    PoolSettings,
    PoolUsage,
    Refusal,
    Reservation,
    UnknownPool,
    check_name,
    check_settings,
    refusal,
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (  # MIGRATIONS[n]: version n -> n + 1; append only
    (
        # The database's clock. `clore_run.now` (a session setting) stands it still for a test
        # of the day boundary; nothing in clore-run sets it.
        """CREATE FUNCTION clore_run_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
            SELECT coalesce(nullif(current_setting('clore_run.now', true), '')::timestamptz,
                            clock_timestamp())
        $$""",
        "CREATE SEQUENCE clore_run_fencing",
        """CREATE TABLE pools (
            name TEXT PRIMARY KEY,
            budget_usd NUMERIC(18, 6) NOT NULL CHECK (budget_usd > 0),
            per_day BOOLEAN NOT NULL,
            max_servers INTEGER NOT NULL CHECK (max_servers > 0),
            events BIGINT NOT NULL DEFAULT 0,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clore_run_now()
        )""",
        """CREATE TABLE leases (
            holder TEXT PRIMARY KEY,
            pool TEXT NOT NULL REFERENCES pools (name),
            token BIGINT NOT NULL,
            ttl_s DOUBLE PRECISION NOT NULL CHECK (ttl_s > 0),
            expires_at TIMESTAMPTZ NOT NULL,
            joined_at TIMESTAMPTZ NOT NULL,
            reaped_by TEXT,
            done_at TIMESTAMPTZ
        )""",
        "CREATE INDEX leases_live ON leases (expires_at) WHERE done_at IS NULL",
        """CREATE TABLE reservations (
            id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            pool TEXT NOT NULL REFERENCES pools (name),
            holder TEXT NOT NULL REFERENCES leases (holder),
            amount_usd NUMERIC(18, 6) NOT NULL CHECK (amount_usd >= 0),
            label TEXT NOT NULL DEFAULT '',
            rental_id BIGINT,
            reserved_at TIMESTAMPTZ NOT NULL,
            settled_at TIMESTAMPTZ,
            billed_usd NUMERIC(18, 6),
            settled_by TEXT
        )""",
        "CREATE INDEX reservations_open ON reservations (pool) WHERE settled_at IS NULL",
        "CREATE INDEX reservations_by_holder ON reservations (holder)",
        "CREATE INDEX reservations_settled ON reservations (pool, settled_at)",
        """CREATE TABLE pool_events (
            pool TEXT NOT NULL REFERENCES pools (name),
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('reserve', 'grow', 'settle')),
            reservation BIGINT NOT NULL,
            amount_usd NUMERIC(18, 6) NOT NULL,
            reserved_usd NUMERIC(18, 6) NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (pool, seq)
        )""",
    ),
)

_SETTINGS = "name, budget_usd, per_day, max_servers"
_RESERVATION = "id, pool, holder, amount_usd, rental_id, label, settled_at IS NOT NULL, billed_usd"


class PostgresPools:
    """The pools in the database at `url`. Thread-safe."""

    def __init__(
        self, url: str, *, timeouts: Timeouts | None = None, lock_pool_row: bool = True
    ) -> None:
        # `lock_pool_row=False` exists for one test only: it shows that, without the lock,
        # concurrent reservations overrun the pool (the test must be able to fail).
        self._lock_clause = "FOR NO KEY UPDATE" if lock_pool_row else ""
        self.db = PgDatabase(url, what="pool database", error=PoolError, timeouts=timeouts)
        try:
            self.db.migrate("pools", MIGRATIONS)
        except PoolError:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> PostgresPools:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- managing pools --------------------------------------------------------------------

    def create(self, name: str, budget_usd: float, *, per_day: bool, max_servers: int) -> None:
        check_name(name)
        check_settings(budget_usd, max_servers)

        def insert(conn: Conn) -> bool:
            cursor = conn.execute(
                "INSERT INTO pools (name, budget_usd, per_day, max_servers) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
                (name, budget_usd, per_day, max_servers),
            )
            return cursor.rowcount == 1

        if not self.db.run("create a pool", insert) and self.settings(name) != PoolSettings(
            name, budget_usd, per_day, max_servers
        ):
            raise PoolError(
                f"pool {name} already exists", hint=f"change it with `clore-run pool set {name}`"
            )

    def set(
        self,
        name: str,
        *,
        budget_usd: float | None = None,
        per_day: bool | None = None,
        max_servers: int | None = None,
    ) -> PoolSettings:
        """Change a pool's limits. Lowering them refuses new reservations; none is revoked."""
        old = self.settings(name)
        new = PoolSettings(
            name,
            old.budget_usd if budget_usd is None else budget_usd,
            old.per_day if per_day is None else per_day,
            old.max_servers if max_servers is None else max_servers,
        )
        check_settings(new.budget_usd, new.max_servers)
        self.db.run(
            "change a pool",
            lambda conn: conn.execute(
                "UPDATE pools SET budget_usd = %s, per_day = %s, max_servers = %s WHERE name = %s",
                (new.budget_usd, new.per_day, new.max_servers, name),
            ),
        )
        return new

    def settings(self, name: str) -> PoolSettings:
        rows = self._read(f"SELECT {_SETTINGS} FROM pools WHERE name = %s", (name,))
        if not rows:
            raise UnknownPool(
                f"no pool named {name!r}",
                hint="create it with `clore-run pool create NAME --budget USD --max-servers N`",
            )
        return _settings(rows[0])

    def names(self) -> list[str]:
        return [r[0] for r in self._read("SELECT name FROM pools ORDER BY name", ())]

    def usage(self, name: str) -> PoolUsage:
        return self.db.run("read a pool", lambda conn: self._usage(conn, name, lock=False))

    def events(self, name: str) -> list[PoolEvent]:
        rows = self._read(
            "SELECT seq, kind, reservation, amount_usd, reserved_usd FROM pool_events "
            "WHERE pool = %s ORDER BY seq",
            (name,),
        )
        return [PoolEvent(int(s), k, int(r), float(a), float(h)) for s, k, r, a, h in rows]

    # -- holders ---------------------------------------------------------------------------

    def join(self, pool: str, holder: str, ttl_s: float) -> Lease:
        """A lease on `pool` for `holder` (a run id, an instance token), alive for `ttl_s`."""

        def insert(conn: Conn) -> int | None:
            if not conn.execute("SELECT 1 FROM pools WHERE name = %s", (pool,)).fetchone():
                return None
            row = conn.execute(
                "INSERT INTO leases (holder, pool, token, ttl_s, expires_at, joined_at) "
                "VALUES (%s, %s, nextval('clore_run_fencing'), %s, "
                "clore_run_now() + %s * interval '1 second', clore_run_now()) "
                "ON CONFLICT (holder) DO NOTHING RETURNING token",
                (holder, pool, ttl_s, ttl_s),
            ).fetchone()
            return int(row[0]) if row else -1

        token = self.db.run("join a pool", insert)
        if token is None:
            self.settings(pool)  # raises UnknownPool
        if token is None or token < 0:
            raise PoolError(f"holder {holder} already has a lease on the pool database")
        return Lease(holder, pool, token, ttl_s)

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease by its ttl. False: it was taken over (fenced) and is lost."""

        def beat(conn: Conn) -> int:
            return conn.execute(
                "UPDATE leases SET expires_at = clore_run_now() + ttl_s * interval '1 second' "
                "WHERE holder = %s AND token = %s AND done_at IS NULL",
                (lease.holder, lease.token),
            ).rowcount

        return self.db.run("heartbeat a lease", beat) == 1

    def leave(self, lease: Lease) -> None:
        """The holder is done: with nothing unsettled the lease ends; otherwise it expires now,
        so that a reaper settles what is left without waiting out the ttl."""

        def end(conn: Conn) -> None:
            self._check_lease(conn, lease)
            open_ = conn.execute(
                "SELECT count(*) FROM reservations WHERE holder = %s AND settled_at IS NULL",
                (lease.holder,),
            ).fetchone()
            column = "expires_at" if open_ and open_[0] else "done_at"
            conn.execute(
                f"UPDATE leases SET {column} = clore_run_now() WHERE holder = %s",
                (lease.holder,),
            )

        self.db.run("leave a pool", end)

    # -- reservations ----------------------------------------------------------------------

    def reserve(
        self, lease: Lease, amount_usd: float, label: str = "", *, key: str | None = None
    ) -> Reservation | Refusal:
        """Reserve `amount_usd` and one server on the lease's pool, if both fit."""
        if not amount_usd >= 0 or amount_usd == float("inf"):
            raise ValueError(f"a reservation must be a finite amount >= 0, not {amount_usd}")
        key = key or uuid.uuid4().hex
        amount_usd = math.ceil(amount_usd * 1e6) / 1e6  # the column's micro-dollars, rounded up

        def take(conn: Conn) -> Reservation | Refusal:
            # A look without the lock first: what does not fit now is refused at once, so
            # waiting contenders poll without queueing on the pool row (a refusal is always
            # safe; only an admission needs the lock, and is counted again under it).
            refused = refusal(self._usage(conn, lease.pool, lock=False), amount_usd)
            if refused is not None and self._lock_clause:
                self._check_lease(conn, lease)
                return refused
            usage = self._usage(conn, lease.pool, lock=True)
            self._check_lease(conn, lease)
            done = conn.execute(
                f"SELECT {_RESERVATION} FROM reservations WHERE key = %s", (key,)
            ).fetchone()
            if done is not None:  # this very transaction committed before its reply was lost
                return _reservation(done)
            refused = refusal(usage, amount_usd)
            if refused is not None:
                return refused
            row = conn.execute(
                "INSERT INTO reservations (key, pool, holder, amount_usd, label, reserved_at) "
                f"VALUES (%s, %s, %s, %s, %s, clore_run_now()) RETURNING {_RESERVATION}",
                (key, lease.pool, lease.holder, amount_usd, label),
            ).fetchone()
            assert row is not None
            made = _reservation(row)
            self._event(conn, lease.pool, "reserve", made.id, made.amount_usd, made.amount_usd)
            return made

        return self.db.run("reserve from a pool", take)

    def grow(self, lease: Lease, reservation_id: int, extra_usd: float) -> Refusal | None:
        """Add `extra_usd` to an unsettled reservation (its server is kept for another job),
        if the pool has the money; None when it was added."""
        extra_usd = math.ceil(max(0.0, extra_usd) * 1e6) / 1e6

        def add(conn: Conn) -> Refusal | None:
            usage = self._usage(conn, lease.pool, lock=True)
            self._check_lease(conn, lease)
            s = usage.settings
            if usage.committed_usd + extra_usd > s.budget_usd + 1e-9:
                why = (
                    f"pool {s.name}: ${usage.committed_usd:.2f} committed + ${extra_usd:.2f} "
                    f"more > ${s.budget_usd:.2f}"
                )
                return Refusal(usage, extra_usd, why, ever=False)
            row = conn.execute(
                "UPDATE reservations SET amount_usd = amount_usd + %s WHERE id = %s "
                "AND holder = %s AND settled_at IS NULL RETURNING amount_usd",
                (extra_usd, reservation_id, lease.holder),
            ).fetchone()
            if row is None:
                raise ValueError(f"reservation {reservation_id} is settled or not this holder's")
            self._event(conn, lease.pool, "grow", reservation_id, extra_usd, float(row[0]))
            return None

        return self.db.run("grow a reservation", add)

    def attach(self, lease: Lease, reservation_id: int, rental_id: int) -> None:
        """Tie a reservation to its ledger row (before the create is sent), so that a reaper
        settles it with what that rental was billed."""

        def tie(conn: Conn) -> None:
            self._check_lease(conn, lease)
            conn.execute(
                "UPDATE reservations SET rental_id = %s WHERE id = %s AND holder = %s",
                (rental_id, reservation_id, lease.holder),
            )

        self.db.run("tie a reservation to its rental", tie)

    def settle(self, lease: Lease, reservation_id: int, billed_usd: float) -> bool:
        """Record what the reservation's rental was billed, freeing its server and the rest of
        its money. False when it was settled already (a rerun, or a reaper was first)."""
        if not billed_usd >= 0 or billed_usd == float("inf"):
            raise ValueError(f"a billed amount must be finite and >= 0, not {billed_usd}")

        def settle_one(conn: Conn) -> bool:
            self._usage(conn, lease.pool, lock=True)  # the pool lock: events in commit order
            self._check_lease(conn, lease)
            row = conn.execute(
                "UPDATE reservations SET settled_at = clore_run_now(), billed_usd = %s, "
                "settled_by = %s WHERE id = %s AND holder = %s AND settled_at IS NULL "
                "RETURNING amount_usd",
                (billed_usd, f"{lease.holder}#{lease.token}", reservation_id, lease.holder),
            ).fetchone()
            if row is None:
                return False
            self._event(conn, lease.pool, "settle", reservation_id, billed_usd, float(row[0]))
            return True

        return self.db.run("settle a reservation", settle_one)

    def reservations(self, holder: str, *, unsettled: bool = True) -> list[Reservation]:
        where = " AND settled_at IS NULL" if unsettled else ""
        rows = self._read(
            f"SELECT {_RESERVATION} FROM reservations WHERE holder = %s{where} ORDER BY id",
            (holder,),
        )
        return [_reservation(r) for r in rows]

    # -- reapers ---------------------------------------------------------------------------

    def take_expired(self, reaper: str, ttl_s: float, limit: int = 10) -> list[Lease]:
        """Take up to `limit` expired leases, each with a new fencing token and `ttl_s` to
        finish in. Leases locked by another transaction (a reaper, a reservation) are skipped."""

        def take(conn: Conn) -> list[Lease]:
            holders = [
                r[0]
                for r in conn.execute(
                    "SELECT holder FROM leases WHERE done_at IS NULL "
                    "AND expires_at <= clore_run_now() ORDER BY expires_at LIMIT %s "
                    "FOR UPDATE SKIP LOCKED",
                    (limit,),
                ).fetchall()
            ]
            if not holders:
                return []
            rows = conn.execute(
                "UPDATE leases SET token = nextval('clore_run_fencing'), reaped_by = %s, "
                "ttl_s = %s, expires_at = clore_run_now() + %s * interval '1 second' "
                "WHERE holder = ANY(%s) RETURNING holder, pool, token",
                (reaper, ttl_s, ttl_s, holders),
            ).fetchall()
            return [Lease(h, p, int(t), ttl_s) for h, p, t in rows]

        return self.db.run("take expired leases", take)

    def finish(self, lease: Lease) -> bool:
        """End a lease whose reservations are all settled. False if some are not (it stays,
        and expires again for the next reaper) or the lease was taken from us."""

        def end(conn: Conn) -> bool:
            return (
                conn.execute(
                    "UPDATE leases SET done_at = clore_run_now() WHERE holder = %s "
                    "AND token = %s AND NOT EXISTS (SELECT 1 FROM reservations "
                    "WHERE holder = %s AND settled_at IS NULL)",
                    (lease.holder, lease.token, lease.holder),
                ).rowcount
                == 1
            )

        return self.db.run("end a lease", end)

    # -- plumbing --------------------------------------------------------------------------

    def _usage(self, conn: Conn, name: str, *, lock: bool) -> PoolUsage:
        clause = self._lock_clause if lock else ""
        row = conn.execute(
            f"SELECT {_SETTINGS} FROM pools WHERE name = %s {clause}", (name,)
        ).fetchone()
        if row is None:
            raise UnknownPool(f"no pool named {name!r}", hint="`clore-run pool show` lists them")
        settings = _settings(row)
        counts = conn.execute(
            "SELECT count(*) FILTER (WHERE settled_at IS NULL), "
            "coalesce(sum(amount_usd) FILTER (WHERE settled_at IS NULL), 0), "
            "coalesce(sum(billed_usd) FILTER (WHERE settled_at IS NOT NULL AND (NOT %s OR "
            "settled_at >= date_trunc('day', clore_run_now() AT TIME ZONE 'UTC') "
            "AT TIME ZONE 'UTC')), 0) FROM reservations WHERE pool = %s",
            (settings.per_day, name),
        ).fetchone()
        holders = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE expires_at <= clore_run_now()) "
            "FROM leases WHERE pool = %s AND done_at IS NULL",
            (name,),
        ).fetchone()
        assert counts is not None and holders is not None
        return PoolUsage(
            settings,
            reserved_usd=float(counts[1]),
            billed_usd=float(counts[2]),
            servers=int(counts[0]),
            holders=int(holders[0]),
            expired_holders=int(holders[1]),
        )

    def _check_lease(self, conn: Conn, lease: Lease) -> None:
        """Refuse a fenced holder. `FOR SHARE` makes a reaper's takeover wait for this
        transaction, so the reaper then sees what it wrote."""
        row = conn.execute(
            "SELECT token, done_at IS NOT NULL FROM leases WHERE holder = %s FOR SHARE",
            (lease.holder,),
        ).fetchone()
        if row is None or int(row[0]) != lease.token or row[1]:
            raise LeaseLost(
                f"the lease of {lease.holder} on pool {lease.pool} was taken over "
                f"(token {lease.token} is stale): it stopped renting",
                hint="its heartbeat stalled past the lease's ttl; a reaper is settling its rentals",
            )

    def _event(
        self, conn: Conn, pool: str, kind: str, reservation: int, amount: float, held: float
    ) -> None:
        conn.execute(
            "WITH n AS (UPDATE pools SET events = events + 1 WHERE name = %s RETURNING events) "
            "INSERT INTO pool_events (pool, seq, kind, reservation, amount_usd, reserved_usd, "
            "at) SELECT %s, n.events, %s, %s, %s, %s, clore_run_now() FROM n",
            (pool, pool, kind, reservation, amount, held),
        )

    def _read(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        def read(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(query.encode(), args).fetchall()

        return self.db.run("read the pools", read)


def _settings(row: Sequence[Any]) -> PoolSettings:
    return PoolSettings(str(row[0]), float(row[1]), bool(row[2]), int(row[3]))


def _reservation(row: Sequence[Any]) -> Reservation:
    ident, pool, holder, amount, rental, label, settled, billed = row
    return Reservation(
        int(ident), pool, holder, float(amount), None if rental is None else int(rental),
        label, bool(settled), None if billed is None else float(billed),
    )  # fmt: skip
