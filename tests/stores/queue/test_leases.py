"""Leases on the shared queue when another client stalls inside a transaction.

A `serve` instance frozen (SIGSTOP) or killed between a transaction's first write and its
COMMIT keeps that row locked until the database ends its session. The others must keep
their own leases meanwhile and take the stalled one's work only once its locks are gone,
and an instance whose own lease ran out must take nobody's work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing

import psycopg
import pytest

from runner.stores.pg import Timeouts
from runner.stores.queue import SharedQueueStore
from runner.stores.queue.postgres import PostgresQueue
from tests.serve.harness import wait_until
from tests.stores.queue.test_contract import expire, jobs

# Long enough that a beat which queued behind the lock wait would visibly outlast it.
LOCK_WAIT_MS = 10_000


@pytest.fixture
def queue(pg_url: str) -> Iterator[SharedQueueStore]:
    with closing(PostgresQueue(pg_url, timeouts=Timeouts(lock_ms=LOCK_WAIT_MS))) as store:
        store.submit("p", "p", lambda n: jobs(n, "a", "b"), 1.0)
        store.join("stalled", 1, "local", 1.0, 60.0)
        store.join("me", 2, "local", 1.0, 60.0)
        assert len(store.claim("stalled", 1, 2.0)) == 1
        store.fenced_start_attempt("s1.a", 1, "stalled", 3.0)
        yield store


@pytest.fixture
def stalled_lock(pg_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """The stalled instance's open transaction, holding its running job's row."""
    with psycopg.connect(pg_url) as conn:
        conn.execute("SELECT 1 FROM queue_jobs WHERE id = 's1.a' FOR UPDATE")
        yield conn
        conn.rollback()


def waiting_for_a_lock(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_a_heartbeat_does_not_queue_behind_a_write_waiting_for_a_stalled_clients_lock(
    queue: SharedQueueStore, stalled_lock: object, pg_url: str
) -> None:
    """The store's connection is busy waiting for the row (up to its lock timeout); the beat
    must renew the lease meanwhile, not after: a lease shorter than that wait would be lost
    by an instance that is alive."""
    waiter = threading.Thread(target=queue.cancel_elsewhere, args=("s1.a", 4.0), daemon=True)
    waiter.start()
    (blocked,) = wait_until(lambda: waiting_for_a_lock(pg_url), what="the write to wait")
    assert queue.heartbeat("me", 60.0)
    assert waiting_for_a_lock(pg_url) == [blocked]  # renewed while the write still waited
    stalled_lock.rollback()  # type: ignore[attr-defined]
    waiter.join(timeout=LOCK_WAIT_MS / 1000)
    assert not waiter.is_alive()


def test_a_dead_instance_is_taken_only_once_its_open_transaction_is_gone(
    queue: SharedQueueStore, stalled_lock: object, pg_url: str
) -> None:
    """Waiting for its row would hold the taker's connection (its scheduling loop's writes)
    for the lock timeout; the take-over is left for the next round instead."""
    expire(pg_url, "stalled")
    assert queue.take_dead("me") == []  # at once: it did not wait LOCK_WAIT_MS for the row
    assert waiting_for_a_lock(pg_url) == []
    stalled_lock.rollback()  # type: ignore[attr-defined]  # the database ended its session
    (taken,) = queue.take_dead("me")
    assert taken.token == "stalled"
    assert [u.job.id for u in taken.running] == ["s1.a"]


def test_an_instance_whose_own_lease_ran_out_takes_nobody(
    queue: SharedQueueStore, pg_url: str
) -> None:
    """Woken from a freeze past its ttl, it must not take the instance that took its work
    (whose lease may have run out meanwhile): it would recover its own job a second time."""
    expire(pg_url, "stalled")
    expire(pg_url, "me")
    assert queue.take_dead("me") == []
    queue.join("fresh", 3, "local", 5.0, 60.0)
    taken = queue.take_dead("fresh")
    assert sorted(t.token for t in taken) == ["me", "stalled"]  # a live taker takes both
