"""The queue: `serve`'s submissions, jobs and attempts. One interface (`QueueStore`, and what a
shared store adds: `SharedQueueStore`), two halves, and which one `--db` names. The rows and
the reads of them are written once for both (rows.py).

- SQLite (sqlite.py): a file, one `serve` on it (a second is refused), every
  unsettled job loaded into that server's core at start.
- PostgreSQL (postgres.py): a `postgresql://` URL, N `serve` instances on it; each
  claims runnable jobs and holds a lease (runner/serve/fleet.py). Its writes from the scheduling
  loop carry the owner, so a server that lost its lease cannot touch a job another one took.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.core.model import Attempt, Job, JobResult
from runner.stores.queue.rows import (
    FINAL,
    STATUSES,
    JobMatch,
    JobRow,
    OpenAttempt,
    QueueError,
    Unsettled,
)
from runner.stores.queue.sqlite import SqliteQueue
from runner.stores.target import check_url, is_postgres_url, require_psycopg

if TYPE_CHECKING:
    from runner.stores.pools.seat import PoolSeat
    from runner.stores.queue.pg_instances import Taken
    from runner.stores.queue.postgres import Whereabouts

__all__ = [
    "FINAL",
    "STATUSES",
    "JobMatch",
    "JobRow",
    "OpenAttempt",
    "QueueError",
    "QueueStore",
    "SharedQueueStore",
    "Unsettled",
    "open_queue",
    "shared",
]


class QueueStore(Protocol):
    """What the service, the API and the dashboard read and write; both stores have it."""

    @property
    def path(self) -> Path | str: ...

    def close(self) -> None: ...

    def begin_instance(self, token: str, pid: int, backend: str, now: float) -> None: ...

    def end_instance(self, token: str, now: float) -> None: ...

    def stale_instances(self, besides: str) -> list[str]:
        """Instances that started on this queue and never stopped, but `besides`: on a
        queue one server holds at a time, each died (a kill -9) and may have left rentals."""
        ...

    def end_session(self, nonce: str, expires: float, now: float) -> None: ...

    def session_ended(self, nonce: str) -> bool: ...

    def submit(
        self, kind: str, label: str, make: Callable[[int], Sequence[Job]], now: float
    ) -> list[tuple[int, Job]]: ...

    def known(self, ids: Sequence[str]) -> set[str]: ...

    def start_attempt(self, job_id: str, number: int, instance: str, now: float) -> None: ...

    def place_attempt(
        self, job_id: str, number: int, server: str, facts: Mapping[str, str], usd_per_hour: float
    ) -> None: ...

    def end_attempt(self, job_id: str, attempt: Attempt, *, requeue: bool = False) -> None: ...

    def requeue(self, job_id: str, at: float, retries_used: int, infra_used: int) -> None: ...

    def settle(self, result: JobResult, now: float) -> None: ...

    def batch(self) -> AbstractContextManager[None]: ...

    def unsettled(self) -> list[Unsettled]: ...

    def open_attempts(self) -> list[OpenAttempt]: ...

    def settled(self, ids: Sequence[str]) -> dict[str, tuple[Job, JobResult]]: ...

    def job(self, job_id: str) -> tuple[JobRow, dict[str, Any]] | None: ...

    def attempts(self, job_id: str) -> list[dict[str, Any]]: ...

    def ended_attempt(self, job_id: str, number: int) -> Attempt | None: ...

    def jobs(self, status: str | None, after: int, limit: int) -> list[JobRow]: ...

    def counts(self) -> dict[str, int]: ...

    def spend_since(self, since: float) -> float: ...

    def timing(self) -> dict[str, float]: ...

    def job_page(self, match: JobMatch, limit: int) -> list[tuple[JobRow, dict[str, Any]]]: ...

    def match_counts(self, match: JobMatch) -> dict[str, int]: ...

    def submission(self, number: int) -> tuple[str, str, float] | None: ...

    def submission_attempts(self, number: int, limit: int) -> list[dict[str, Any]]: ...

    def spend_by_day(self, since: float) -> list[tuple[float, float]]: ...

    def record_idle(self, instance: str, rows: Sequence[tuple[int, str, float, float]]) -> None:
        """`instance`'s idle money totals (UTC day number, GPU model, USD, seconds), each
        replacing what it recorded for that day and GPU."""
        ...

    def idle_money(self, since_day: int, besides: str = "") -> list[tuple[int, str, float, float]]:
        """Idle money from `since_day` on, summed over the instances (but `besides`)."""
        ...


class SharedQueueStore(QueueStore, Protocol):
    """What N instances on one database add: leases, claims, take-overs, fenced writes."""

    @property
    def url(self) -> str: ...

    def join(self, token: str, pid: int, backend: str, now: float, ttl_s: float) -> None: ...

    def heartbeat(self, token: str, ttl_s: float) -> bool: ...

    def set_url(self, token: str, url: str) -> None: ...

    def claim(self, token: str, limit: int, now: float) -> list[Unsettled]: ...

    def claim_slots_from(self, seat: PoolSeat, *, in_claim: bool = True) -> None: ...

    def take_dead(self, taker: str, limit: int = 5) -> list[Taken]: ...

    def cancel_requests(self, token: str) -> list[str]: ...

    def cancel_elsewhere(self, job_id: str, now: float) -> str: ...

    def whereabouts(self, job_id: str) -> Whereabouts: ...

    def live_instances(self) -> list[tuple[str, str]]: ...

    def notify(self) -> None: ...

    def fenced_start_attempt(self, job_id: str, number: int, instance: str, now: float) -> None: ...

    def fenced_end_attempt(
        self, job_id: str, attempt: Attempt, owner: str, *, requeue: bool = False
    ) -> None: ...

    def fenced_requeue(
        self, job_id: str, at: float, retries_used: int, infra_used: int, owner: str
    ) -> None: ...

    def fenced_settle(self, result: JobResult, now: float, owner: str) -> None: ...


def open_queue(target: str | Path, *, lease_ttl_s: float | None = None) -> QueueStore:
    """The store `--db` names: a `postgresql://` URL, else a SQLite file path. With
    `lease_ttl_s`, a lost connection is retried for a third of it, not a minute: an instance
    that cannot reach the database must learn it before its lease runs out."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.pg import Timeouts  # psycopg only when asked for
        from runner.stores.queue.postgres import PostgresQueue

        timeouts = Timeouts(reconnect_s=lease_ttl_s / 3) if lease_ttl_s else None
        return PostgresQueue(check_url(str(target), "--db"), timeouts=timeouts)
    return SqliteQueue(Path(target))


def shared(store: QueueStore) -> SharedQueueStore | None:
    """The store as a shared one, if other instances may work on it."""
    if getattr(store, "shared", False):
        return store  # type: ignore[return-value]
    return None
