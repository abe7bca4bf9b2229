"""Budget pools in PostgreSQL (the words are in runner/stores/pools/__init__.py).

A reservation is one short transaction, and one round trip: a function in the server
(clore_run_reserve, made by a migration) called in a single autocommitted statement. It locks
the pool row (`FOR NO KEY UPDATE`: reservations wait for each other, inserts that only
reference the pool do not), locks the holder's lease row (`FOR SHARE`: a reaper's takeover
waits for it, so it sees every reservation made under the old token), counts the unsettled
reservations from the rows themselves — expired but not yet reaped ones included, their servers
may still bill — and inserts if it fits. Times are the database's (`clore_run_now()`), never a
client's: machines disagree, one database does not. Every change is also numbered in
`pool_events` under the pool lock, which makes the order of commits visible to an audit (and to
the test that replays it).

Reapers take expired leases with `FOR UPDATE SKIP LOCKED` (two reapers never take the same one,
and neither waits for the other) and give each a new fencing token.

Grows, settles and attaches are functions too, and heartbeats a single UPDATE: a holder's
hot path never sends BEGIN, a query, then COMMIT while other holders queue on the pool row.

Each transaction is safe to run twice (runner/stores/pg.py reruns it after a lost connection):
a reservation has a client-made key, a settle only touches an unsettled row.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from runner import liveness
from runner.stores.pg import Conn, LeaseLine, PgDatabase, Timeouts
from runner.stores.pools import (
    HeldLease,
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

# What a pool holds now, from the rows themselves (the database's clock): the unsettled
# reservations, expired-but-not-reaped holders' included (their servers may still bill), and
# what was billed in the window: today in UTC (the settled rows since midnight, an index range),
# or ever (the pool's running total, kept by clore_run_settle under the pool lock, so that the
# cost of a reservation does not grow with the pool's history). No row: no such pool.
# PL/pgSQL, not SQL: it keeps its plan for the session (PostgreSQL before 18 plans a SQL
# function's body at every call, which costs more than running it).
_POOL_USAGE = """CREATE FUNCTION clore_run_pool_usage(p_pool TEXT)
    RETURNS TABLE (budget_usd DOUBLE PRECISION, per_day BOOLEAN, max_servers INTEGER,
                   reserved_usd DOUBLE PRECISION, billed_usd DOUBLE PRECISION,
                   servers INTEGER, holders INTEGER, expired_holders INTEGER)
    LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT p.budget_usd::float8, p.per_day, p.max_servers, r.reserved::float8,
           (CASE WHEN p.per_day THEN d.billed ELSE p.billed_usd END)::float8,
           r.servers::integer, l.holders::integer, l.expired::integer
    FROM pools p,
    LATERAL (SELECT count(*) AS servers, coalesce(sum(amount_usd), 0) AS reserved
             FROM reservations WHERE pool = p.name AND settled_at IS NULL) r,
    LATERAL (SELECT coalesce(sum(billed_usd), 0) AS billed FROM reservations
             WHERE p.per_day AND pool = p.name AND settled_at >=
                 date_trunc('day', clore_run_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') d,
    LATERAL (SELECT count(*) AS holders,
                    count(*) FILTER (WHERE expires_at <= clore_run_now()) AS expired
             FROM leases WHERE pool = p.name AND done_at IS NULL) l
    WHERE p.name = p_pool;
END $$"""

# Is the lease still this holder's (the token not fenced, the lease not ended)? `FOR SHARE`
# makes a reaper's takeover wait for the calling transaction, so the reaper then sees what it
# wrote.
_LEASE_HELD = """CREATE FUNCTION clore_run_lease_held(p_holder TEXT, p_token BIGINT)
    RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held BOOLEAN;
BEGIN
    SELECT token = p_token AND done_at IS NULL INTO held FROM leases
        WHERE holder = p_holder FOR SHARE;
    RETURN coalesce(held, false);
END $$"""

# Whether `amount` and one server fit: the same test, in the same float arithmetic, as
# `refusal()` in runner/stores/pools/__init__.py, which words the refusal.
_FITS = """CREATE FUNCTION clore_run_fits(budget DOUBLE PRECISION, max_servers INTEGER,
    reserved DOUBLE PRECISION, billed DOUBLE PRECISION, servers INTEGER,
    amount DOUBLE PRECISION) RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS $$
    SELECT amount <= budget AND servers + 1 <= max_servers
        AND reserved + billed + amount <= budget + 1e-9::float8
$$"""

# One change, numbered under the pool row's lock: `seq` is the commit order.
_POOL_EVENT = """CREATE FUNCTION clore_run_pool_event(p_pool TEXT, p_kind TEXT,
    p_reservation BIGINT, p_amount NUMERIC, p_held NUMERIC) RETURNS VOID LANGUAGE sql AS $$
    WITH n AS (UPDATE pools SET events = events + 1 WHERE name = p_pool RETURNING events)
    INSERT INTO pool_events (pool, seq, kind, reservation, amount_usd, reserved_usd, at)
        SELECT p_pool, n.events, p_kind, p_reservation, p_amount, p_held, clore_run_now()
        FROM n
$$"""

# A reservation. Status: reserved (the reservation's columns are set: a new one, or the one
# this key made before, when a rerun follows a lost reply), refused (the usage columns say
# why), lost (fenced), unknown (no such pool). First a look without the lock, so that
# contenders waiting on a full pool are refused without queueing on its row; an admission is
# decided again under the lock. (The statement that takes the lock is one line of its own:
# `_unlocked()` drops it for the test that must see the overrun.)
_RESERVE = """CREATE FUNCTION clore_run_reserve(p_holder TEXT, p_token BIGINT, p_pool TEXT,
    p_key TEXT, p_amount DOUBLE PRECISION, p_label TEXT,
    OUT o_status TEXT, OUT o_budget_usd DOUBLE PRECISION, OUT o_per_day BOOLEAN,
    OUT o_max_servers INTEGER, OUT o_reserved_usd DOUBLE PRECISION,
    OUT o_billed_usd DOUBLE PRECISION, OUT o_servers INTEGER, OUT o_holders INTEGER,
    OUT o_expired_holders INTEGER, OUT o_id BIGINT, OUT o_amount_usd DOUBLE PRECISION,
    OUT o_rental_id BIGINT, OUT o_label TEXT, OUT o_settled BOOLEAN,
    OUT o_billed DOUBLE PRECISION) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT * INTO o_budget_usd, o_per_day, o_max_servers, o_reserved_usd, o_billed_usd,
        o_servers, o_holders, o_expired_holders FROM clore_run_pool_usage(p_pool);
    IF NOT FOUND THEN
        o_status := 'unknown';
        RETURN;
    END IF;
    IF NOT clore_run_fits(o_budget_usd, o_max_servers, o_reserved_usd, o_billed_usd,
                          o_servers, p_amount)
       AND NOT EXISTS (SELECT 1 FROM reservations WHERE key = p_key) THEN
        -- A refusal writes nothing, so a plain read tells a fenced holder (no row lock: a
        -- lock is a write, and waiting contenders poll).
        o_status := CASE WHEN EXISTS (SELECT 1 FROM leases WHERE holder = p_holder
                                      AND token = p_token AND done_at IS NULL)
                         THEN 'refused' ELSE 'lost' END;
        RETURN;
    END IF;
    PERFORM 1 FROM pools WHERE name = p_pool FOR NO KEY UPDATE;
    SELECT * INTO o_budget_usd, o_per_day, o_max_servers, o_reserved_usd, o_billed_usd,
        o_servers, o_holders, o_expired_holders FROM clore_run_pool_usage(p_pool);
    IF NOT clore_run_lease_held(p_holder, p_token) THEN
        o_status := 'lost';
        RETURN;
    END IF;
    SELECT id, amount_usd::float8, rental_id, label, settled_at IS NOT NULL, billed_usd::float8
        INTO o_id, o_amount_usd, o_rental_id, o_label, o_settled, o_billed
        FROM reservations WHERE key = p_key;
    IF FOUND THEN
        o_status := 'reserved';
        RETURN;
    END IF;
    IF NOT clore_run_fits(o_budget_usd, o_max_servers, o_reserved_usd, o_billed_usd,
                          o_servers, p_amount) THEN
        o_status := 'refused';
        RETURN;
    END IF;
    INSERT INTO reservations (key, pool, holder, amount_usd, label, reserved_at)
        VALUES (p_key, p_pool, p_holder, p_amount, p_label, clore_run_now())
        RETURNING id, amount_usd::float8, rental_id, label, false, billed_usd::float8
        INTO o_id, o_amount_usd, o_rental_id, o_label, o_settled, o_billed;
    PERFORM clore_run_pool_event(p_pool, 'reserve', o_id, o_amount_usd::numeric,
                                 o_amount_usd::numeric);
    o_status := 'reserved';
END $$"""

# More money on an unsettled reservation (its server kept for another job). Status: grown,
# refused (the usage columns say why), missing (settled, or not this holder's), lost, unknown.
_GROW = """CREATE FUNCTION clore_run_grow(p_holder TEXT, p_token BIGINT, p_pool TEXT,
    p_reservation BIGINT, p_extra DOUBLE PRECISION,
    OUT o_status TEXT, OUT o_budget_usd DOUBLE PRECISION, OUT o_per_day BOOLEAN,
    OUT o_max_servers INTEGER, OUT o_reserved_usd DOUBLE PRECISION,
    OUT o_billed_usd DOUBLE PRECISION, OUT o_servers INTEGER, OUT o_holders INTEGER,
    OUT o_expired_holders INTEGER) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held NUMERIC;
BEGIN
    PERFORM 1 FROM pools WHERE name = p_pool FOR NO KEY UPDATE;
    SELECT * INTO o_budget_usd, o_per_day, o_max_servers, o_reserved_usd, o_billed_usd,
        o_servers, o_holders, o_expired_holders FROM clore_run_pool_usage(p_pool);
    IF NOT FOUND THEN
        o_status := 'unknown';
        RETURN;
    END IF;
    IF NOT clore_run_lease_held(p_holder, p_token) THEN
        o_status := 'lost';
        RETURN;
    END IF;
    IF o_reserved_usd + o_billed_usd + p_extra > o_budget_usd + 1e-9::float8 THEN
        o_status := 'refused';
        RETURN;
    END IF;
    UPDATE reservations SET amount_usd = amount_usd + p_extra::numeric
        WHERE id = p_reservation AND holder = p_holder AND settled_at IS NULL
        RETURNING amount_usd INTO held;
    IF NOT FOUND THEN
        o_status := 'missing';
        RETURN;
    END IF;
    PERFORM clore_run_pool_event(p_pool, 'grow', p_reservation, p_extra::numeric, held);
    o_status := 'grown';
END $$"""

# Record what a reservation's rental was billed. Status: settled, already (settled before: a
# rerun, or a reaper was first), lost, unknown. The pool lock keeps events in commit order.
_SETTLE = """CREATE FUNCTION clore_run_settle(p_holder TEXT, p_token BIGINT, p_pool TEXT,
    p_reservation BIGINT, p_billed DOUBLE PRECISION, p_by TEXT)
    RETURNS TEXT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held NUMERIC;
    billed NUMERIC;
BEGIN
    PERFORM 1 FROM pools WHERE name = p_pool FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF NOT clore_run_lease_held(p_holder, p_token) THEN
        RETURN 'lost';
    END IF;
    UPDATE reservations SET settled_at = clore_run_now(), billed_usd = p_billed,
        settled_by = p_by
        WHERE id = p_reservation AND holder = p_holder AND settled_at IS NULL
        RETURNING amount_usd, billed_usd INTO held, billed;
    IF NOT FOUND THEN
        RETURN 'already';
    END IF;
    UPDATE pools SET billed_usd = pools.billed_usd + billed WHERE name = p_pool;
    PERFORM clore_run_pool_event(p_pool, 'settle', p_reservation, p_billed::numeric, held);
    RETURN 'settled';
END $$"""

# Tie a reservation to its ledger row; false: the lease was lost.
_ATTACH = """CREATE FUNCTION clore_run_attach(p_holder TEXT, p_token BIGINT,
    p_reservation BIGINT, p_rental BIGINT) RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT clore_run_lease_held(p_holder, p_token) THEN
        RETURN false;
    END IF;
    UPDATE reservations SET rental_id = p_rental WHERE id = p_reservation AND holder = p_holder;
    RETURN true;
END $$"""


# Migration 3: a `serve` instance claims a job together with a server slot for it (one
# transaction: runner/stores/queue/postgres.py), so that no job is claimed without a slot.
#
# A slot is a reservation of $0 and one server, marked with the job it is for (`slot_for`).
# The job's rental, when its price is known, reserves the money and takes the slot over in the
# same function (the slot is settled as the rental's reservation is made: the server is counted
# once); what is left of a slot is given back when the job settles, is requeued, or its
# instance is taken over.

# How many of `p_want` slots the pool has room for, the pool row locked for the rest of the
# calling transaction (the claim's), which then holds them with clore_run_hold_slots. NULL: no
# such pool; -1: the lease is not the holder's. A look without the lock first, as in
# clore_run_reserve: instances polling a full pool are answered without queueing on its row.
_CLAIM_ROOM = """CREATE FUNCTION clore_run_claim_room(p_holder TEXT, p_token BIGINT,
    p_pool TEXT, p_want INTEGER) RETURNS INTEGER LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    u RECORD;
BEGIN
    SELECT * INTO u FROM clore_run_pool_usage(p_pool);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NOT clore_run_fits(u.budget_usd, u.max_servers, u.reserved_usd, u.billed_usd,
                          u.servers, 0) THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM pools WHERE name = p_pool FOR NO KEY UPDATE;
    IF NOT clore_run_lease_held(p_holder, p_token) THEN
        RETURN -1;
    END IF;
    SELECT * INTO u FROM clore_run_pool_usage(p_pool);
    IF NOT clore_run_fits(u.budget_usd, u.max_servers, u.reserved_usd, u.billed_usd,
                          u.servers, 0) THEN
        RETURN 0;
    END IF;
    RETURN least(p_want, u.max_servers - u.servers);
END $$"""

# One slot per job in `p_jobs`; only after clore_run_claim_room in the same transaction (the
# pool row is locked, and the room was counted under that lock). Keyed by the claim, so a
# claim run again after a lost reply holds no second slot.
_HOLD_SLOTS = """CREATE FUNCTION clore_run_hold_slots(p_holder TEXT, p_pool TEXT, p_key TEXT,
    p_jobs TEXT[]) RETURNS TABLE (o_job TEXT, o_id BIGINT) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    job TEXT;
    made BIGINT;
BEGIN
    FOREACH job IN ARRAY p_jobs LOOP
        INSERT INTO reservations (key, pool, holder, amount_usd, label, reserved_at, slot_for)
            VALUES (p_key || ':' || job, p_pool, p_holder, 0, 'job ' || job || ' (claimed)',
                    clore_run_now(), job)
            RETURNING id INTO made;
        PERFORM clore_run_pool_event(p_pool, 'reserve', made, 0, 0);
        o_job := job;
        o_id := made;
        RETURN NEXT;
    END LOOP;
END $$"""

# Give back the slots among `p_ids` that are still held (settled at $0); the others (taken over
# by their rental, or given back before) are left alone. Returns how many it gave back.
_RELEASE_SLOTS = """CREATE FUNCTION clore_run_release_slots(p_ids BIGINT[], p_by TEXT)
    RETURNS INTEGER LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r RECORD;
    n INTEGER := 0;
BEGIN
    FOR r IN SELECT DISTINCT pool FROM reservations WHERE id = ANY(p_ids)
             AND settled_at IS NULL AND slot_for IS NOT NULL ORDER BY pool LOOP
        PERFORM 1 FROM pools WHERE name = r.pool FOR NO KEY UPDATE;
    END LOOP;
    FOR r IN UPDATE reservations SET settled_at = clore_run_now(), billed_usd = 0,
                 settled_by = p_by
             WHERE id = ANY(p_ids) AND settled_at IS NULL AND slot_for IS NOT NULL
             RETURNING id, pool LOOP
        PERFORM clore_run_pool_event(r.pool, 'settle', r.id, 0, 0);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$"""

# clore_run_reserve with `p_slot`: the slot the job's claim holds, if any. A held slot is this
# rental's server already: the fit is tested with one server fewer, and the slot is settled
# as the reservation is made.
_RESERVE_SLOT = (
    _RESERVE.replace(
        "p_key TEXT, p_amount DOUBLE PRECISION, p_label TEXT,\n",
        "p_key TEXT, p_amount DOUBLE PRECISION, p_label TEXT, p_slot BIGINT,\n",
    )
    .replace(
        "OUT o_billed DOUBLE PRECISION) LANGUAGE plpgsql VOLATILE AS $$\nBEGIN\n",
        "OUT o_billed DOUBLE PRECISION) LANGUAGE plpgsql VOLATILE AS $$\n"
        "DECLARE\n    slot INTEGER;\nBEGIN\n"
        "    slot := CASE WHEN p_slot IS NOT NULL AND EXISTS (SELECT 1 FROM reservations\n"
        "        WHERE id = p_slot AND holder = p_holder AND settled_at IS NULL\n"
        "        AND slot_for IS NOT NULL) THEN 1 ELSE 0 END;\n",
    )
    .replace("o_servers, p_amount)", "o_servers - slot, p_amount)")
    .replace(
        "    o_status := 'reserved';\nEND $$",
        "    IF slot = 1 THEN\n"
        "        UPDATE reservations SET settled_at = clore_run_now(), billed_usd = 0,\n"
        "            settled_by = 'rental ' || o_id WHERE id = p_slot AND settled_at IS NULL;\n"
        "        IF FOUND THEN\n"
        "            PERFORM clore_run_pool_event(p_pool, 'settle', p_slot, 0, 0);\n"
        "        END IF;\n"
        "    END IF;\n"
        "    o_status := 'reserved';\nEND $$",
    )
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
    # Reservations, grows, settles and attaches as functions in the server: each is one
    # statement, so one round trip (no BEGIN, no COMMIT, no query after query while the pool
    # row is locked). A change to one of them is a new migration that replaces it.
    (
        "ALTER TABLE pools ADD COLUMN billed_usd NUMERIC(18, 6) NOT NULL DEFAULT 0",
        """UPDATE pools SET billed_usd = (SELECT coalesce(sum(r.billed_usd), 0)
            FROM reservations r WHERE r.pool = pools.name AND r.settled_at IS NOT NULL)""",
        _POOL_USAGE,
        _LEASE_HELD,
        _FITS,
        _POOL_EVENT,
        _RESERVE,
        _GROW,
        _SETTLE,
        _ATTACH,
    ),
    (
        "ALTER TABLE reservations ADD COLUMN slot_for TEXT",
        "DROP FUNCTION clore_run_reserve(TEXT, BIGINT, TEXT, TEXT, DOUBLE PRECISION, TEXT)",
        _RESERVE_SLOT,
        _CLAIM_ROOM,
        _HOLD_SLOTS,
        _RELEASE_SLOTS,
    ),
    # The process that holds the lease (runner/liveness.py): a cleanup on its host can prove
    # it dead at once, instead of waiting for the lease to expire.
    ("ALTER TABLE leases ADD COLUMN owner TEXT",),
)

_SETTINGS = "name, budget_usd, per_day, max_servers"
_RESERVATION = "id, pool, holder, amount_usd, rental_id, label, settled_at IS NOT NULL, billed_usd"


# A reaper takes a lease: a new fencing token (the old holder's late writes are refused from
# then on), who took it, and `ttl_s` to finish in. Parameters: reaper, ttl_s, ttl_s.
_TAKE_LEASES = (
    "UPDATE leases SET token = nextval('clore_run_fencing'), reaped_by = %s, "
    "ttl_s = %s, expires_at = clore_run_now() + %s * interval '1 second' "
)


class PostgresPools:
    """The pools in the database at `url`. Thread-safe."""

    def __init__(
        self, url: str, *, timeouts: Timeouts | None = None, lock_pool_row: bool = True
    ) -> None:
        self.db = PgDatabase(url, what="pool database", error=PoolError, timeouts=timeouts)
        self.db.migrate("pools", MIGRATIONS)
        self._lease = LeaseLine(self.db)
        # `lock_pool_row=False` exists for one test only: it shows that, without the lock,
        # concurrent reservations overrun the pool (the test must be able to fail).
        self._reserve_fn = "clore_run_reserve"
        if not lock_pool_row:
            self.db.migrate("pools-unlocked-test", ((_unlocked(_RESERVE_SLOT),),))
            self._reserve_fn = "clore_run_reserve_unlocked"

    def close(self) -> None:
        self._lease.close()
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
        rows = self._read("SELECT * FROM clore_run_pool_usage(%s)", (name,))
        if not rows:
            raise UnknownPool(f"no pool named {name!r}", hint="`clore-run pool show` lists them")
        return _usage(name, rows[0])

    def events(self, name: str) -> list[PoolEvent]:
        rows = self._read(
            "SELECT seq, kind, reservation, amount_usd, reserved_usd FROM pool_events "
            "WHERE pool = %s ORDER BY seq",
            (name,),
        )
        return [PoolEvent(int(s), k, int(r), float(a), float(h)) for s, k, r, a, h in rows]

    # -- holders ---------------------------------------------------------------------------

    def join(self, pool: str, holder: str, ttl_s: float, *, owned: bool = True) -> Lease:
        """A lease on `pool` for `holder` (a run id, an instance token), alive for `ttl_s`.
        `owned`: the lease names this process, so a reaper that proves it dead may take the
        lease early. Not owned (a runner start, whose servers outlive it): the lease is only
        ever taken once it expires."""

        me = liveness.current() if owned else None
        owner = None if me is None else me.text()

        def insert(conn: Conn) -> int | None:
            if not conn.execute("SELECT 1 FROM pools WHERE name = %s", (pool,)).fetchone():
                return None
            row = conn.execute(
                "INSERT INTO leases (holder, pool, token, ttl_s, expires_at, joined_at, owner) "
                "VALUES (%s, %s, nextval('clore_run_fencing'), %s, "
                "clore_run_now() + %s * interval '1 second', clore_run_now(), %s) "
                "ON CONFLICT (holder) DO NOTHING RETURNING token",
                (holder, pool, ttl_s, ttl_s, owner),
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

        return self._lease.run(lease.ttl_s, "heartbeat a lease", beat) == 1

    def leave(self, lease: Lease) -> None:
        """The holder is done: with nothing unsettled the lease ends; otherwise it expires now,
        so that a reaper settles what is left without waiting out the ttl."""

        def end(conn: Conn) -> None:
            held = conn.execute(
                "SELECT clore_run_lease_held(%s, %s)", (lease.holder, lease.token)
            ).fetchone()
            if not (held and held[0]):
                raise _lost(lease)
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
        self,
        lease: Lease,
        amount_usd: float,
        label: str = "",
        *,
        key: str | None = None,
        slot: int | None = None,
    ) -> Reservation | Refusal:
        """Reserve `amount_usd` and one server on the lease's pool, if both fit. `slot`: the
        server slot a claim holds for this rental's job (the reservation takes it over)."""
        if not amount_usd >= 0 or amount_usd == float("inf"):
            raise ValueError(f"a reservation must be a finite amount >= 0, not {amount_usd}")
        key = key or uuid.uuid4().hex
        amount_usd = math.ceil(amount_usd * 1e6) / 1e6  # the column's micro-dollars, rounded up

        row = self._call(
            "reserve from a pool", f"{self._reserve_fn}(%s, %s, %s, %s, %s, %s, %s)",
            (lease.holder, lease.token, lease.pool, key, amount_usd, label, slot),
        )  # fmt: skip
        status, usage_row, made = row[0], row[1:9], row[9:]
        self._raise_for(status, lease)
        if status == "reserved":
            ident, amount, rental, label_, settled, billed = made
            return Reservation(
                int(ident), lease.pool, lease.holder, float(amount),
                None if rental is None else int(rental), label_, bool(settled),
                None if billed is None else float(billed),
            )  # fmt: skip
        usage = _usage(lease.pool, usage_row)
        return refusal(usage, amount_usd) or Refusal(usage, amount_usd, "pool is full", False)

    def grow(self, lease: Lease, reservation_id: int, extra_usd: float) -> Refusal | None:
        """Add `extra_usd` to an unsettled reservation (its server is kept for another job),
        if the pool has the money; None when it was added."""
        extra_usd = math.ceil(max(0.0, extra_usd) * 1e6) / 1e6
        row = self._call(
            "grow a reservation", "clore_run_grow(%s, %s, %s, %s, %s)",
            (lease.holder, lease.token, lease.pool, reservation_id, extra_usd),
        )  # fmt: skip
        self._raise_for(row[0], lease)
        if row[0] == "missing":
            raise ValueError(f"reservation {reservation_id} is settled or not this holder's")
        if row[0] == "grown":
            return None
        usage = _usage(lease.pool, row[1:9])
        why = (
            f"pool {lease.pool}: ${usage.committed_usd:.2f} committed + ${extra_usd:.2f} "
            f"more > ${usage.settings.budget_usd:.2f}"
        )
        return Refusal(usage, extra_usd, why, ever=False)

    def attach(self, lease: Lease, reservation_id: int, rental_id: int) -> None:
        """Tie a reservation to its ledger row (before the create is sent), so that a reaper
        settles it with what that rental was billed."""
        row = self._call(
            "tie a reservation to its rental", "clore_run_attach(%s, %s, %s, %s)",
            (lease.holder, lease.token, reservation_id, rental_id),
        )  # fmt: skip
        if not row[0]:
            raise _lost(lease)

    def settle(self, lease: Lease, reservation_id: int, billed_usd: float) -> bool:
        """Record what the reservation's rental was billed, freeing its server and the rest of
        its money. False when it was settled already (a rerun, or a reaper was first)."""
        if not billed_usd >= 0 or billed_usd == float("inf"):
            raise ValueError(f"a billed amount must be finite and >= 0, not {billed_usd}")
        by = f"{lease.holder}#{lease.token}"
        row = self._call(
            "settle a reservation", "clore_run_settle(%s, %s, %s, %s, %s, %s)",
            (lease.holder, lease.token, lease.pool, reservation_id, billed_usd, by),
        )  # fmt: skip
        self._raise_for(row[0], lease)
        return bool(row[0] == "settled")

    def release_slots(self, slots: Sequence[int], by: str) -> int:
        """Give back claim slots still held (a job placed on a kept server needs none)."""
        row = self._call(
            "give back server slots", "clore_run_release_slots(%s, %s)", (list(slots), by)
        )
        return int(row[0])

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
                _TAKE_LEASES + "WHERE holder = ANY(%s) RETURNING holder, pool, token",
                (reaper, ttl_s, ttl_s, holders),
            ).fetchall()
            return [Lease(h, p, int(t), ttl_s) for h, p, t in rows]

        return self.db.run("take expired leases", take)

    def live_leases(self) -> list[HeldLease]:
        """Every lease not ended and not expired (the database's clock), soonest expiry first."""
        rows = self._read(
            "SELECT l.holder, l.pool, l.owner, "
            "extract(epoch FROM l.expires_at - clore_run_now())::float8, l.ttl_s, "
            "(SELECT count(*) FROM reservations r WHERE r.holder = l.holder "
            "AND r.settled_at IS NULL) FROM leases l WHERE l.done_at IS NULL "
            "AND l.expires_at > clore_run_now() ORDER BY l.expires_at",
            (),
        )
        return [
            HeldLease(str(h), str(p), o, float(left), float(ttl), int(n))
            for h, p, o, left, ttl, n in rows
        ]

    def take_holder(self, holder: str, reaper: str, ttl_s: float) -> Lease | None:
        """Take `holder`'s lease now, expired or not, with a new fencing token (None: it has
        none left). For a holder known dead by other means: a serve instance whose queue lease
        another instance took (its late reservations and settles are refused from here on)."""

        def take(conn: Conn) -> Lease | None:
            row = conn.execute(
                _TAKE_LEASES + "WHERE holder = %s AND done_at IS NULL RETURNING pool, token",
                (reaper, ttl_s, ttl_s, holder),
            ).fetchone()
            return None if row is None else Lease(holder, str(row[0]), int(row[1]), ttl_s)

        return self.db.run("take a dead holder's lease", take)

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

        return self.db.run("end a lease", end, one_statement=True)

    # -- plumbing --------------------------------------------------------------------------

    def _call(self, doing: str, call: str, args: Sequence[Any]) -> tuple[Any, ...]:
        """One function call: one statement, one round trip; its one row."""

        def run(conn: Conn) -> tuple[Any, ...]:
            row = conn.execute(f"SELECT * FROM {call}".encode(), args).fetchone()
            assert row is not None
            return tuple(row)

        return self.db.run(doing, run, one_statement=True)

    @staticmethod
    def _raise_for(status: str, lease: Lease) -> None:
        if status == "lost":
            raise _lost(lease)
        if status == "unknown":
            raise UnknownPool(
                f"no pool named {lease.pool!r}", hint="`clore-run pool show` lists them"
            )

    def _read(self, query: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        def read(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(query.encode(), args).fetchall()

        return self.db.run("read the pools", read)


def _settings(row: Sequence[Any]) -> PoolSettings:
    return PoolSettings(str(row[0]), float(row[1]), bool(row[2]), int(row[3]))


def _usage(name: str, row: Sequence[Any]) -> PoolUsage:
    """A PoolUsage from clore_run_pool_usage()'s columns."""
    budget, per_day, max_servers, reserved, billed, servers, holders, expired = row
    return PoolUsage(
        PoolSettings(name, float(budget), bool(per_day), int(max_servers)),
        reserved_usd=float(reserved), billed_usd=float(billed), servers=int(servers),
        holders=int(holders), expired_holders=int(expired),
    )  # fmt: skip


def _lost(lease: Lease) -> LeaseLost:
    """The refusal of a fenced holder."""
    return LeaseLost(
        f"the lease of {lease.holder} on pool {lease.pool} was taken over "
        f"(token {lease.token} is stale): it stopped renting",
        hint="its heartbeat stalled past the lease's ttl; a reaper is settling what it held",
    )


def _unlocked(function: str) -> str:
    """The reservation function without its pool-row lock, under a name of its own."""
    lock = "    PERFORM 1 FROM pools WHERE name = p_pool FOR NO KEY UPDATE;\n"
    assert lock in function
    return function.replace(lock, "").replace("clore_run_reserve(", "clore_run_reserve_unlocked(")


def _reservation(row: Sequence[Any]) -> Reservation:
    ident, pool, holder, amount, rental, label, settled, billed = row
    return Reservation(
        int(ident), pool, holder, float(amount), None if rental is None else int(rental),
        label, bool(settled), None if billed is None else float(billed),
    )  # fmt: skip
