"""The queue's PostgreSQL half: what runner/stores/queue/sqlite.py keeps in SQLite, shared by N
`serve` instances on one database.

The rows are the SQLite half's, and so are the reads, written once for both
(runner/stores/queue/rows.py; this half gives its table names and SQL words). What sharing
adds:
- every job has an `owner` (the instance whose scheduling core holds it, None while nobody
  does). An instance claims runnable jobs (queued, unowned, due, every need settled) with
  `FOR UPDATE SKIP LOCKED`: two instances claiming at once take different rows, neither waits.
- instances hold leases (`expires_at`, on the database's clock) that they heartbeat; the
  instance token, new at every start, is the fencing token: every write the scheduling loop
  makes names it (`owner = me`), so once another instance has taken a dead one's jobs, a late
  write of the dead one touches no row and raises JobTakenOver.
- an instance whose lease expired is taken (SKIP LOCKED again, one taker) by another: its
  queued jobs become unowned, its running ones become the taker's, who records their attempts
  as lost and retries them by the retry table (runner/serve/fleet.py).
- `NOTIFY clore_run_queue` after a submission, a settlement and a release wakes the others;
  they poll behind it, so a lost notification costs a poll interval, never a job.
A transaction is run again after a lost connection (runner/stores/pg.py), so each is safe to
repeat: a submission and a claim carry a key of their own and find their first landing.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.core.model import DEFAULT_TRUST, Attempt, FailureKind, Job, JobResult
from runner.stores.pg import Conn, LeaseLine, PgDatabase, Timeouts
from runner.stores.queue.codec import dumps, job_from_json, job_to_json
from runner.stores.queue.pg_base import CHANNEL, _give_back, _release
from runner.stores.queue.pg_instances import _LIVE_LEASE, PgInstances
from runner.stores.queue.rows import (
    FINAL,
    JOB_COLUMNS,
    STATUSES,
    QueueDialect,
    QueueError,
    Unsettled,
    placed_facts,
    unsettled_from,
)
from runner.stores.target import redact_url

if TYPE_CHECKING:
    from runner.stores.pools.seat import PoolSeat

# A job asked to be cancelled while its instance stopped: the hand-over's kill of its attempt
# was the cancel's (the attempt is not `server_lost`: its server was fine, nothing retries it).
CANCELLED_IN_HAND_OVER = "cancelled by request while its queue server shut down"
POSTGRES = QueueDialect(
    jobs="queue_jobs",
    attempts="queue_attempts",
    submissions="queue_submissions",
    idle="queue_idle_money",
    find="strpos",
    day="floor({} / 86400)",
    arrays=True,
)
_STATUS_LIST = ", ".join(f"'{s}'" for s in STATUSES)
_FINAL_LIST = ", ".join(f"'{s}'" for s in FINAL)

MIGRATIONS: tuple[tuple[str, ...], ...] = (  # MIGRATIONS[n]: version n -> n + 1; append only
    (
        """CREATE TABLE queue_submissions (
            id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            label TEXT NOT NULL,
            submitted_at DOUBLE PRECISION NOT NULL
        )""",
        f"""CREATE TABLE queue_jobs (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            submission BIGINT NOT NULL REFERENCES queue_submissions (id),
            name TEXT NOT NULL,
            spec TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ({_STATUS_LIST})),
            priority TEXT NOT NULL,
            rank INTEGER NOT NULL,
            submitted_at DOUBLE PRECISION NOT NULL,
            first_started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            reason TEXT NOT NULL DEFAULT '',
            attempts INTEGER NOT NULL DEFAULT 0,
            cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
            retries_used INTEGER NOT NULL DEFAULT 0,
            infra_used INTEGER NOT NULL DEFAULT 0,
            retry_at DOUBLE PRECISION,
            not_before DOUBLE PRECISION,
            failure_origin TEXT NOT NULL DEFAULT '',
            owner TEXT,
            claim TEXT,
            cancel_requested BOOLEAN NOT NULL DEFAULT false
        )""",
        "CREATE INDEX queue_jobs_by_status ON queue_jobs (status, seq)",
        "CREATE INDEX queue_jobs_claimable ON queue_jobs (rank DESC, seq) "
        "WHERE status = 'queued' AND owner IS NULL",
        "CREATE INDEX queue_jobs_owned ON queue_jobs (owner) WHERE status IN ('queued', 'running')",
        "CREATE INDEX queue_jobs_claim ON queue_jobs (claim)",
        """CREATE TABLE queue_needs (
            job TEXT NOT NULL,
            need TEXT NOT NULL,
            PRIMARY KEY (job, need)
        )""",
        """CREATE TABLE queue_attempts (
            job_id TEXT NOT NULL REFERENCES queue_jobs (id),
            number INTEGER NOT NULL,
            instance TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            finished_at DOUBLE PRECISION,
            exit_code INTEGER,
            failure TEXT,
            message TEXT NOT NULL DEFAULT '',
            server TEXT NOT NULL DEFAULT '',
            cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
            facts TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (job_id, number)
        )""",
        "CREATE INDEX queue_attempts_by_end ON queue_attempts (finished_at)",
        """CREATE TABLE queue_instances (
            token TEXT PRIMARY KEY,
            pid INTEGER NOT NULL,
            backend TEXT NOT NULL,
            url TEXT NOT NULL DEFAULT '',
            started_at DOUBLE PRECISION NOT NULL,
            stopped_at DOUBLE PRECISION,
            expires_at TIMESTAMPTZ NOT NULL,
            taken_by TEXT,
            taken_key TEXT
        )""",
        "CREATE INDEX queue_instances_live ON queue_instances (expires_at) WHERE taken_by IS NULL",
    ),
    # The server slot (a reservation in the budget pool, runner/stores/pools/postgres.py) the job's
    # claim holds for it, to give back when the job settles or is requeued.
    ("ALTER TABLE queue_jobs ADD COLUMN pool_slot BIGINT",),
    # A cancel request stays until the job settles; `cancel_seen_by` is the owner that took it
    # (so it is passed on once per owner, and a taker carries out what a dead owner took).
    ("ALTER TABLE queue_jobs ADD COLUMN cancel_seen_by TEXT",),
    # Dashboard sessions logged out before they expire: every instance's check reads them.
    (
        "CREATE TABLE queue_ended_sessions "
        "(nonce TEXT PRIMARY KEY, expires DOUBLE PRECISION NOT NULL)",
    ),
    # A submission's trust domain on each of its jobs: a server is reused only within one.
    # Jobs queued before it are the default domain's.
    (f"ALTER TABLE queue_jobs ADD COLUMN trust TEXT NOT NULL DEFAULT '{DEFAULT_TRUST}'",),
    # Idle money (what rented servers cost while they ran no job), so a restart shows the
    # figures it had: each instance's own totals, which it overwrites (a transaction run again
    # after a lost connection writes the same), summed over the instances when read.
    (
        """CREATE TABLE queue_idle_money (
            instance TEXT NOT NULL,
            day BIGINT NOT NULL,
            gpu TEXT NOT NULL,
            usd DOUBLE PRECISION NOT NULL,
            seconds DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (instance, day, gpu)
        )""",
    ),
)

_OWNED = "EXISTS (SELECT 1 FROM queue_jobs o WHERE o.id = %(job)s AND o.owner = %(me)s)"


class JobTakenOver(QueueError):
    """This instance no longer owns the job: its lease expired and another took its work."""


@dataclass(frozen=True)
class Whereabouts:
    """Who holds a job and where that instance said it listens."""

    owner: str | None
    url: str
    alive: bool


class PostgresQueue(PgInstances):
    """The queue in the database at `url`. Thread-safe. `shared` tells the service that other
    instances may work on the same rows (so jobs are claimed, not all loaded at start)."""

    shared = True
    _dialect = POSTGRES

    def __init__(
        self, url: str, *, timeouts: Timeouts | None = None, skip_locked: bool = True
    ) -> None:
        # `skip_locked=False` exists for one test only: it shows that without the row locks
        # of a claim, two instances take the same job (the test must be able to fail).
        self._claim_lock = "FOR UPDATE OF j SKIP LOCKED" if skip_locked else ""
        self.url = url
        self.path = redact_url(url)  # what messages name (server_cmd prints it)
        self.db = PgDatabase(url, what="queue database", error=QueueError, timeouts=timeouts)
        self._lease = LeaseLine(self.db)
        self._batch = threading.local()
        self._seat: PoolSeat | None = None
        self._slots_in_claim = True
        self.db.migrate("queue", MIGRATIONS)

    def close(self) -> None:
        self._lease.close()
        self.db.close()

    def record_idle(self, instance: str, rows: Sequence[tuple[int, str, float, float]]) -> None:
        """`instance`'s idle money totals, (UTC day number, GPU model, USD, seconds): each
        replaces what it recorded for that day and GPU before (so writing one twice is safe)."""

        def write(conn: Conn) -> None:
            for day, gpu, usd, seconds in rows:
                conn.execute(
                    "INSERT INTO queue_idle_money (instance, day, gpu, usd, seconds) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (instance, day, gpu) DO UPDATE "
                    "SET usd = excluded.usd, seconds = excluded.seconds",
                    (instance, day, gpu, usd, seconds),
                )

        self._run("record idle money", write)

    # -- claims ----------------------------------------------------------------------------

    def claim_slots_from(self, seat: PoolSeat, *, in_claim: bool = True) -> None:
        """From now on each job is claimed together with a server slot in `seat`'s budget
        pool, which lives in this database: in one transaction, under the pool row's lock, so
        no job is claimed without a slot (and no slot held for a job not claimed).
        `in_claim=False` exists for one test only: the slots taken in a transaction of their
        own after the claim's, which the test sees claim jobs with no slot."""
        self._seat = seat
        self._slots_in_claim = in_claim

    def claim(self, token: str, limit: int, now: float) -> list[Unsettled]:
        """Up to `limit` runnable jobs for `token`: queued, nobody's, due (retry time and
        not-before at or before `now`, the instances' own clock, as the core's timers are),
        every need settled. Highest priority first, then submission order. Nothing while
        `token`'s lease has expired (or was taken, or ended). With a pool (claim_slots_from),
        no more jobs than the pool has server slots for, each holding one."""
        if limit <= 0:
            return []
        key = uuid.uuid4().hex
        seat = self._seat
        in_claim = seat is not None and self._slots_in_claim
        apart = 0
        if seat is not None and not in_claim:  # the twin: the room read before, on its own
            apart = self.db.run("count the pool's room", lambda conn: _room(conn, seat, limit))

        def take(conn: Conn) -> tuple[list[Unsettled], dict[str, int]]:
            rows = conn.execute(
                f"SELECT {JOB_COLUMNS}, spec, pool_slot FROM queue_jobs "
                "WHERE claim = %s AND owner = %s",
                (key, token),
            ).fetchall()
            if rows:  # a landed first try, when the reply to its COMMIT was lost
                slots = {str(r[1]): int(r[-1]) for r in rows if r[-1] is not None}
                return [unsettled_from(r[:-1]) for r in rows], slots
            want = limit if seat is None else _room(conn, seat, limit) if in_claim else apart
            if want <= 0:
                return [], {}
            claimed = self._claim_rows(conn, token, key, want, now)
            if seat is None or not in_claim or not claimed:
                return claimed, {}
            return claimed, _hold(conn, seat, key, [u.row.id for u in claimed])

        claimed, slots = self.db.run("claim jobs", take)
        if seat is not None and not in_claim and claimed:
            slots = self._hold_apart(seat, key, claimed)
        if seat is not None:
            seat.hold_slots(slots)
        return sorted(claimed, key=lambda u: (-u.job.priority, u.row.seq))

    def _claim_rows(
        self, conn: Conn, token: str, key: str, limit: int, now: float
    ) -> list[Unsettled]:
        rows = conn.execute(
            f"""UPDATE queue_jobs SET owner = %(me)s, claim = %(key)s WHERE seq IN (
                SELECT j.seq FROM queue_jobs j
                WHERE {_LIVE_LEASE} AND j.status = 'queued' AND j.owner IS NULL
                AND (j.retry_at IS NULL OR j.retry_at <= %(now)s)
                AND (j.not_before IS NULL OR j.not_before <= %(now)s)
                AND NOT EXISTS (
                    SELECT 1 FROM queue_needs n JOIN queue_jobs d ON d.id = n.need
                    WHERE n.job = j.id AND d.status IN ('queued', 'running'))
                ORDER BY j.rank DESC, j.seq
                LIMIT %(limit)s
                {self._claim_lock}
            ) RETURNING {JOB_COLUMNS}, spec""",
            {"me": token, "key": key, "now": now, "limit": limit},
        ).fetchall()
        return [unsettled_from(r) for r in rows]

    def _hold_apart(self, seat: PoolSeat, key: str, claimed: list[Unsettled]) -> dict[str, int]:
        """The test's twin: the slots in a transaction after the claim's (the bug it shows)."""

        def hold(conn: Conn) -> dict[str, int]:
            room = max(0, _room(conn, seat, len(claimed)))
            return _hold(conn, seat, key, [u.row.id for u in claimed[:room]]) if room else {}

        return self.db.run("hold server slots", hold)

    def cancel_requests(self, token: str) -> list[str]:
        """Jobs this instance holds that another instance was asked to cancel (each passed on
        once). The request stays on the row until the job settles: if this instance dies
        before it carries it out, the instance that takes its work does (take_dead)."""

        def take(conn: Conn) -> list[str]:
            rows = conn.execute(
                "UPDATE queue_jobs SET cancel_seen_by = %s WHERE owner = %s "
                "AND cancel_requested AND cancel_seen_by IS DISTINCT FROM %s "
                "AND status IN ('queued', 'running') RETURNING id",
                (token, token, token),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return self.db.run("take the cancel requests", take)

    def cancel_elsewhere(self, job_id: str, now: float) -> str:
        """Cancel a job this instance does not hold: a queued one nobody holds is settled
        here; one another instance holds gets a request its owner acts on. As
        Service.cancel: 'cancelled', 'cancelling', 'unknown' or 'final:<status>'."""

        def cancel(conn: Conn) -> str:
            row = conn.execute(
                "SELECT status, owner FROM queue_jobs WHERE id = %s FOR UPDATE", (job_id,)
            ).fetchone()
            if row is None:
                return "unknown"
            status, owner = row
            if status in FINAL:
                return f"final:{status}"
            if owner is None:
                conn.execute(
                    "UPDATE queue_jobs SET status = 'cancelled', reason = 'cancelled by request', "
                    "finished_at = %s, retry_at = NULL, failure_origin = id WHERE id = %s",
                    (now, job_id),
                )
                conn.execute(f"NOTIFY {CHANNEL}")
                return "cancelled"
            conn.execute("UPDATE queue_jobs SET cancel_requested = true WHERE id = %s", (job_id,))
            conn.execute(f"NOTIFY {CHANNEL}")
            return "cancelling"

        return self.db.run("cancel a job", cancel)

    def whereabouts(self, job_id: str) -> Whereabouts:
        rows = self._select(
            "SELECT coalesce(j.owner, a.instance), coalesce(i.url, ''), "
            "coalesce(i.taken_by IS NULL AND i.stopped_at IS NULL AND i.expires_at > now(), "
            "false) FROM queue_jobs j "
            "LEFT JOIN queue_attempts a ON a.job_id = j.id AND a.number = j.attempts "
            "LEFT JOIN queue_instances i ON i.token = coalesce(j.owner, a.instance) "
            "WHERE j.id = ?",
            (job_id,),
        )
        if not rows:
            return Whereabouts(None, "", False)
        owner, url, alive = rows[0]
        return Whereabouts(owner, str(url), bool(alive))

    def notify(self) -> None:
        self._write("wake the other servers", f"NOTIFY {CHANNEL}", ())

    # -- submissions -----------------------------------------------------------------------

    def submit(
        self, kind: str, label: str, make: Callable[[int], Sequence[Job]], now: float
    ) -> list[tuple[int, Job]]:
        key = uuid.uuid4().hex

        def insert(conn: Conn) -> list[tuple[int, Job]]:
            found = conn.execute(
                "SELECT id FROM queue_submissions WHERE key = %s", (key,)
            ).fetchone()
            if found is not None:  # a landed first try: its jobs, not a second copy
                rows = conn.execute(
                    "SELECT seq, spec FROM queue_jobs WHERE submission = %s ORDER BY seq",
                    (found[0],),
                ).fetchall()
                return [(int(s), job_from_json(json.loads(spec))) for s, spec in rows]
            row = conn.execute(
                "INSERT INTO queue_submissions (key, kind, label, submitted_at) "
                "VALUES (%s, %s, %s, %s) RETURNING id",
                (key, kind, label, now),
            ).fetchone()
            assert row is not None
            number = int(row[0])
            out = []
            jobs = list(make(number))
            with conn.cursor() as cursor:
                for job in jobs:
                    seq = cursor.execute(
                        "INSERT INTO queue_jobs (id, submission, name, spec, status, priority, "
                        "rank, submitted_at, not_before, trust) "
                        "VALUES (%s, %s, %s, %s, 'queued', %s, %s, %s, %s, %s) RETURNING seq",
                        (
                            job.id, number, job.name, dumps(job_to_json(job)),
                            job.priority.name.lower(), int(job.priority), now, job.not_before,
                            job.trust,
                        ),
                    ).fetchone()  # fmt: skip
                    assert seq is not None
                    out.append((int(seq[0]), job))
                needs = [(job.id, need) for job in jobs for need in dict.fromkeys(job.needs)]
                if needs:
                    cursor.executemany("INSERT INTO queue_needs (job, need) VALUES (%s, %s)", needs)
            conn.execute(f"NOTIFY {CHANNEL}")
            return out

        return self.db.run("queue the jobs", insert)

    # -- what the scheduling loop writes (fenced by the owner) -----------------------------

    def start_attempt(self, job_id: str, number: int, instance: str, now: float) -> None:
        self._start_attempt(job_id, number, instance, now, fenced=False)

    def fenced_start_attempt(self, job_id: str, number: int, instance: str, now: float) -> None:
        """Record the start while `instance` holds the job, else raise JobTakenOver."""
        self._start_attempt(job_id, number, instance, now, fenced=True)

    def _start_attempt(
        self, job_id: str, number: int, instance: str, now: float, *, fenced: bool
    ) -> None:
        args = {"job": job_id, "me": instance, "n": number, "now": now}
        fence = " AND owner = %(me)s" if fenced else ""

        def start(conn: Conn) -> None:
            cursor = conn.execute(
                "UPDATE queue_jobs SET status = 'running', attempts = %(n)s, retry_at = NULL, "
                "first_started_at = coalesce(first_started_at, %(now)s) "
                f"WHERE id = %(job)s{fence}",
                args,
            )
            if fenced:
                self._owned(cursor.rowcount, job_id, instance)
            conn.execute(
                "INSERT INTO queue_attempts (job_id, number, instance, started_at) "
                "VALUES (%(job)s, %(n)s, %(me)s, %(now)s) ON CONFLICT (job_id, number) DO "
                "UPDATE SET instance = excluded.instance, started_at = excluded.started_at, "
                "finished_at = NULL, exit_code = NULL, failure = NULL, message = '', "
                "server = '', cost_usd = 0, facts = '{}'",
                args,
            )

        self._run("record an attempt start", start)

    def place_attempt(
        self, job_id: str, number: int, server: str, facts: Mapping[str, str], usd_per_hour: float
    ) -> None:
        self._write(
            "record where an attempt runs",
            "UPDATE queue_attempts SET server = %s, facts = %s WHERE job_id = %s AND number = %s "
            "AND finished_at IS NULL",
            (server, placed_facts(facts, usd_per_hour), job_id, number),
        )

    def end_attempt(self, job_id: str, attempt: Attempt, *, requeue: bool = False) -> None:
        self._end_attempt(job_id, attempt, requeue, None)

    def fenced_end_attempt(
        self, job_id: str, attempt: Attempt, owner: str, *, requeue: bool = False
    ) -> None:
        """Complete the attempt row while `owner` holds the job, else raise JobTakenOver.
        `requeue`: the job goes back to everyone (a server handing over at shutdown), or is
        cancelled if a cancel was asked for it meanwhile."""
        self._end_attempt(job_id, attempt, requeue, owner)

    def _end_attempt(self, job_id: str, attempt: Attempt, requeue: bool, owner: str | None) -> None:
        args = {
            "job": job_id, "me": owner, "n": attempt.number, "end": attempt.finished_at,
            "code": attempt.exit_code,
            "failure": attempt.failure.value if attempt.failure else None,
            "msg": attempt.message, "server": attempt.server, "cost": attempt.cost_usd,
            "facts": dumps(dict(attempt.facts)),
        }  # fmt: skip
        fence = f" AND {_OWNED}" if owner is not None else ""

        def end(conn: Conn) -> None:
            cursor = conn.execute(
                "UPDATE queue_attempts SET finished_at = %(end)s, exit_code = %(code)s, "
                "failure = %(failure)s, message = %(msg)s, server = %(server)s, "
                "cost_usd = %(cost)s, facts = %(facts)s "
                f"WHERE job_id = %(job)s AND number = %(n)s{fence}",
                args,
            )
            if owner is not None:
                self._owned(cursor.rowcount, job_id, owner)
            conn.execute(
                "UPDATE queue_jobs SET cost_usd = (SELECT coalesce(sum(cost_usd), 0) "
                "FROM queue_attempts WHERE job_id = %(job)s) WHERE id = %(job)s",
                args,
            )
            if requeue:
                cancelled, slots = _give_back(conn, "id = %(job)s", args, "%(end)s")
                if cancelled:  # the hand-over's kill ended it for the cancel, not a lost server
                    conn.execute(
                        "UPDATE queue_attempts SET failure = %(cancel)s, message = %(why)s "
                        "WHERE job_id = %(job)s AND number = %(n)s",
                        {
                            **args,
                            "cancel": FailureKind.CANCELLED.value,
                            "why": CANCELLED_IN_HAND_OVER,
                        },
                    )
                _release(conn, slots, f"requeue of {job_id}")

        self._run("record an attempt end", end)

    def requeue(self, job_id: str, at: float, retries_used: int, infra_used: int) -> None:
        self._requeue(job_id, at, retries_used, infra_used, None)

    def fenced_requeue(
        self, job_id: str, at: float, retries_used: int, infra_used: int, owner: str
    ) -> None:
        self._requeue(job_id, at, retries_used, infra_used, owner)

    def _requeue(
        self, job_id: str, at: float, retries_used: int, infra_used: int, owner: str | None
    ) -> None:
        fence = " AND owner = %(me)s" if owner is not None else ""
        args = {"job": job_id, "me": owner, "at": at, "r": retries_used, "i": infra_used}

        def write(conn: Conn) -> None:
            cursor = conn.execute(
                "UPDATE queue_jobs SET status = 'queued', retry_at = %(at)s, retries_used = %(r)s, "
                f"infra_used = %(i)s WHERE id = %(job)s{fence} RETURNING pool_slot",
                args,
            )
            if owner is not None:
                self._owned(cursor.rowcount, job_id, owner)
            _release(conn, [r[0] for r in cursor.fetchall()], f"requeue of {job_id}")

        self._run("requeue a job", write)

    def settle(self, result: JobResult, now: float) -> None:
        self._settle(result, now, None)

    def fenced_settle(self, result: JobResult, now: float, owner: str) -> None:
        self._settle(result, now, owner)

    def _settle(self, result: JobResult, now: float, owner: str | None) -> None:
        fence = " AND owner = %(me)s" if owner is not None else ""
        args = {
            "job": result.job_id, "me": owner, "status": result.status.value,
            "reason": result.reason, "now": now, "origin": result.failure_origin,
        }  # fmt: skip

        def write(conn: Conn) -> None:
            cursor = conn.execute(
                "UPDATE queue_jobs SET status = %(status)s, reason = %(reason)s, "
                "finished_at = %(now)s, retry_at = NULL, failure_origin = %(origin)s "
                f"WHERE id = %(job)s{fence} RETURNING pool_slot",
                args,
            )
            if owner is not None:
                self._owned(cursor.rowcount, result.job_id, owner)
            _release(conn, [r[0] for r in cursor.fetchall()], f"end of {result.job_id}")
            conn.execute(f"NOTIFY {CHANNEL}")

        self._run("settle a job", write)

    # -- plumbing ---------------------------------------------------------------------------

    def _owned(self, rowcount: int, job_id: str, owner: str) -> None:
        if rowcount == 0:
            raise JobTakenOver(
                f"{self.db.where}: job {job_id} is no longer held by server {owner} "
                "(its lease expired and another server took its work)"
            )


def _room(conn: Conn, seat: PoolSeat, want: int) -> int:
    """How many server slots the seat's pool has room for, up to `want`; the pool row stays
    locked until the calling transaction ends. 0 when the seat's pool lease was taken (the
    seat's keeper says so, and the serve instance stops)."""
    lease = seat.keeper.lease
    row = conn.execute(
        "SELECT clore_run_claim_room(%s, %s, %s, %s)", (lease.holder, lease.token, seat.pool, want)
    ).fetchone()
    if row is None or row[0] is None:
        raise QueueError(f"no budget pool named {seat.pool!r} in the queue database")
    return max(0, int(row[0]))


def _hold(conn: Conn, seat: PoolSeat, key: str, ids: list[str]) -> dict[str, int]:
    """One slot per claimed job, tied to its row (after _room in the same transaction)."""
    rows = conn.execute(
        "UPDATE queue_jobs q SET pool_slot = s.o_id "
        "FROM clore_run_hold_slots(%s, %s, %s, %s) s WHERE q.id = s.o_job "
        "RETURNING q.id, q.pool_slot",
        (seat.holder, seat.pool, key, ids),
    ).fetchall()
    return {str(job): int(slot) for job, slot in rows}
