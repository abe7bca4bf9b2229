"""The instances of the queue's PostgreSQL half: each `serve` holds a lease it heartbeats; one
whose lease ran out is taken by another (its queued jobs to everyone, its running ones to the
taker); a clean stop gives its jobs back; dashboard logouts hold for every instance."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from runner.stores.pg import Conn, LeaseLine
from runner.stores.queue.pg_base import CHANNEL, PgQueueBase, _give_back, _release
from runner.stores.queue.rows import JOB_COLUMNS, OpenAttempt, Unsettled, unsettled_from

# The claimer's lease runs: one woken from a freeze past its ttl claims nothing (in the moment
# before its refused heartbeat stops it, a claim would strand jobs until a taker recovered them).
_LIVE_LEASE = (
    "EXISTS (SELECT 1 FROM queue_instances i WHERE i.token = %(me)s AND i.taken_by IS NULL "
    "AND i.stopped_at IS NULL AND i.expires_at > now())"
)


@dataclass(frozen=True)
class Taken:
    """A dead instance's work, now the taker's: the jobs it was running, their open attempts."""

    token: str
    running: list[Unsettled]
    open_attempts: dict[str, OpenAttempt]
    cancelled: list[str] = field(default_factory=list)  # its jobs a cancel was asked for


class PgInstances(PgQueueBase):
    """The instance registry's half of PostgresQueue: leases, stops, take-overs, logouts."""

    _lease: LeaseLine

    # -- instances -------------------------------------------------------------------------

    def begin_instance(self, token: str, pid: int, backend: str, now: float) -> None:
        self.join(token, pid, backend, now, 30.0)

    def join(self, token: str, pid: int, backend: str, now: float, ttl_s: float) -> None:
        """Record the instance with a lease of `ttl_s` on the database's clock."""
        url = ""

        def insert(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO queue_instances (token, pid, backend, url, started_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s)) "
                "ON CONFLICT (token) DO NOTHING",
                (token, pid, backend, url, now, ttl_s),
            )

        self.db.run("record the server start", insert)

    def set_url(self, token: str, url: str) -> None:
        self._write(
            "record where the server listens",
            "UPDATE queue_instances SET url = %s WHERE token = %s",
            (url, token),
        )

    def heartbeat(self, token: str, ttl_s: float) -> bool:
        """Extend the lease; False once it was taken (or never was), the caller must stop."""

        def beat(conn: Conn) -> int:
            cursor = conn.execute(
                "UPDATE queue_instances SET expires_at = now() + make_interval(secs => %s) "
                "WHERE token = %s AND taken_by IS NULL AND stopped_at IS NULL "
                "AND expires_at > now()",
                (ttl_s, token),
            )
            return cursor.rowcount

        return self._lease.run(ttl_s, "renew the server's lease", beat) == 1

    def end_session(self, nonce: str, expires: float, now: float) -> None:
        """A dashboard logout, for every instance (expired ones are dropped on the way)."""

        def end(conn: Conn) -> None:
            conn.execute("DELETE FROM queue_ended_sessions WHERE expires <= %s", (now,))
            conn.execute(
                "INSERT INTO queue_ended_sessions (nonce, expires) VALUES (%s, %s) "
                "ON CONFLICT (nonce) DO NOTHING",
                (nonce, expires),
            )

        self._run("record a logout", end)

    def session_ended(self, nonce: str) -> bool:
        return bool(self._select("SELECT 1 FROM queue_ended_sessions WHERE nonce = ?", (nonce,)))

    def stale_instances(self, besides: str) -> list[str]:
        """None here: on a shared queue a dead instance's lease expires and another instance
        takes it over, reconciling what it held (runner/serve/fleet.py)."""
        return []

    def end_instance(self, token: str, now: float) -> None:
        """A clean stop: its queued jobs go back to everyone (those a cancel was asked for
        are cancelled), its lease ends now (a running job it could not hand over is recovered,
        or cancelled as asked, by whoever takes it next)."""

        def end(conn: Conn) -> None:
            args = {"me": token, "now": now}
            _, slots = _give_back(conn, "owner = %(me)s AND status = 'queued'", args, "%(now)s")
            _release(conn, slots, f"stop of {token}")
            conn.execute(
                "UPDATE queue_instances SET stopped_at = %(now)s, expires_at = now() "
                "WHERE token = %(me)s AND taken_by IS NULL",
                args,
            )
            conn.execute(f"NOTIFY {CHANNEL}")

        self.db.run("record the server stop", end)

    def take_dead(self, taker: str, limit: int = 5) -> list[Taken]:
        """Take instances whose lease expired: one taker each (SKIP LOCKED), in one
        transaction with their jobs (queued ones to everyone, running ones to the taker)."""
        key = uuid.uuid4().hex

        def take(conn: Conn) -> list[Taken]:
            tokens = [
                r[0]
                for r in conn.execute(
                    "SELECT token FROM queue_instances WHERE taken_key = %s", (key,)
                ).fetchall()
            ]  # a landed first try, when the reply to its COMMIT was lost
            if not tokens:
                tokens = _dead_to_take(conn, taker, limit)
            return [self._take_one(conn, taker, key, token) for token in tokens]

        taken = self.db.run("take the work of a dead server", take)
        return taken

    def _take_one(self, conn: Conn, taker: str, key: str, token: str) -> Taken:
        conn.execute(
            "UPDATE queue_instances SET taken_by = %s, taken_key = %s, "
            "stopped_at = coalesce(stopped_at, extract(epoch FROM now())) WHERE token = %s",
            (taker, key, token),
        )
        cancelled = _cancel_held(conn, token, taker, key)
        given = conn.execute(
            "UPDATE queue_jobs SET owner = NULL, claim = NULL "
            "WHERE owner = %s AND status = 'queued' RETURNING pool_slot",
            (token,),
        ).fetchall()
        rows = conn.execute(
            f"UPDATE queue_jobs SET owner = %s, claim = %s WHERE owner IN (%s, %s) "
            f"AND status = 'running' AND (owner = %s OR claim = %s) "
            f"RETURNING {JOB_COLUMNS}, spec, pool_slot",
            (taker, key, token, taker, token, key),
        ).fetchall()
        # Every slot the dead instance's claims held goes back: its running attempts are lost,
        # and their retries reserve anew when they rent.
        slots = [r[0] for r in given] + [r[-1] for r in rows] + [r[1] for r in cancelled]
        _release(conn, slots, f"take-over of {token}")
        running = sorted((unsettled_from(r[:-1]) for r in rows), key=lambda u: u.row.seq)
        ids = [u.row.id for u in running]
        opened = conn.execute(
            "SELECT job_id, number, instance, started_at FROM queue_attempts "
            "WHERE finished_at IS NULL AND job_id = ANY(%s)",
            (ids,),
        ).fetchall()
        if rows or cancelled:
            conn.execute(f"NOTIFY {CHANNEL}")
        attempts = {r[0]: OpenAttempt(*r) for r in opened}
        return Taken(token, running, attempts, [str(r[0]) for r in cancelled])

    def live_instances(self) -> list[tuple[str, str]]:
        """(token, url) of the instances whose lease runs."""
        rows = self._select(
            "SELECT token, url FROM queue_instances WHERE taken_by IS NULL "
            "AND stopped_at IS NULL AND expires_at > now() ORDER BY started_at",
            (),
        )
        return [(str(t), str(u)) for t, u in rows]


def _dead_to_take(conn: Conn, taker: str, limit: int) -> list[str]:
    """Instances whose lease expired that `taker` may take now, each locked for it.

    Nothing while the taker's own lease has run out: an instance woken from a freeze past its
    ttl must not take the instance that took its work (it would recover its own job twice) in
    the moment before its refused heartbeat stops it.
    Left for a later round: one with a job row still locked. Its client stopped (frozen,
    killed) inside a transaction, which the database rolls back when it ends that session;
    waiting for the lock here would hold this store's connection, and every write the
    taker's scheduling loop makes, for as long."""
    live = conn.execute(f"SELECT {_LIVE_LEASE}", {"me": taker}).fetchone()
    if not (live and live[0]):
        return []
    expired = conn.execute(
        "SELECT token FROM queue_instances WHERE taken_by IS NULL "
        "AND expires_at < now() AND token <> %s "
        "ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED",
        (taker, limit),
    ).fetchall()
    free = []
    for (token,) in expired:
        owned = _count(conn, "SELECT count(*) FROM queue_jobs WHERE owner = %s", token)
        lockable = _count(
            conn,
            "SELECT count(*) FROM (SELECT 1 FROM queue_jobs WHERE owner = %s "
            "FOR UPDATE SKIP LOCKED) AS rows_now_ours",
            token,
        )
        if lockable == owned:
            free.append(str(token))
    return free


def _count(conn: Conn, query: str, token: str) -> int:
    row = conn.execute(query.encode(), (token,)).fetchone()
    return int(row[0]) if row else 0


def _cancel_held(conn: Conn, dead: str, taker: str, key: str) -> list[tuple[str, int | None]]:
    """A dead instance's jobs with a cancel request are cancelled by its taker, in the
    take-over's transaction: retried (running) or given to everyone (queued), a job asked to
    be cancelled would run again. Their open attempts end `server_lost` (their server went with
    the instance; the taker's recovery kills or cancels what is left of it)."""
    conn.execute(
        "UPDATE queue_jobs SET status = 'cancelled', reason = 'cancelled by request', "
        "finished_at = extract(epoch FROM now()), retry_at = NULL, failure_origin = id, "
        "owner = %s, claim = %s WHERE owner = %s AND cancel_requested "
        "AND status IN ('queued', 'running')",
        (taker, key, dead),
    )
    rows = conn.execute(  # these, or the first try's when its reply was lost (`key`)
        "SELECT id, pool_slot FROM queue_jobs WHERE owner = %s AND claim = %s "
        "AND status = 'cancelled'",
        (taker, key),
    ).fetchall()
    if rows:
        conn.execute(
            "UPDATE queue_attempts SET finished_at = extract(epoch FROM now()), "
            "failure = 'server_lost', message = %s WHERE job_id = ANY(%s) AND finished_at IS NULL",
            (f"lost with server {dead}; cancelled by request", [r[0] for r in rows]),
        )
    return [(str(job), slot) for job, slot in rows]
