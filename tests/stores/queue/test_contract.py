"""The queue store's contract, run against both implementations (SQLite file, PostgreSQL), and
what only the shared PostgreSQL store does: claims, leases, take-overs, fenced writes."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing

import psycopg
import pytest

from runner.core.model import Attempt, FailureKind, Job, JobResult, JobStatus, Priority
from runner.stores.pg import PgDatabase
from runner.stores.queue import JobMatch, QueueError, QueueStore, open_queue, shared
from runner.stores.queue.postgres import MIGRATIONS
from runner.stores.queue.sqlite import SqliteQueue
from tests.pg_fixture import PgCluster
from tests.stores.pg_helpers import open_at_once


@pytest.fixture
def store(store_target: str) -> Iterator[QueueStore]:
    with closing(open_queue(store_target)) as opened:
        yield opened


def jobs(number: int, *names: str, needs: dict[str, str] | None = None) -> list[Job]:
    needs = needs or {}
    return [
        Job(
            id=f"s{number}.{n}",
            name=n,
            run="true",
            needs=(f"s{number}.{needs[n]}",) if n in needs else (),
            priority=Priority.HIGH if n.startswith("hi") else Priority.NORMAL,
        )
        for n in names
    ]


def test_a_submission_is_stored_whole_and_read_back(store: QueueStore) -> None:
    stored = store.submit("pipeline", "p", lambda n: jobs(n, "a", "b", needs={"b": "a"}), 10.0)
    assert [j.id for _, j in stored] == ["s1.a", "s1.b"]
    assert store.known(["s1.a", "s1.zz"]) == {"s1.a"}
    assert [u.job.needs for u in store.unsettled()] == [(), ("s1.a",)]
    assert store.counts()["queued"] == 2
    assert store.submission(1) == ("pipeline", "p", 10.0)
    row, spec = store.job("s1.b") or pytest.fail("no job")
    assert (row.status, row.priority, spec["needs"]) == ("queued", "normal", ["s1.a"])


def test_a_lookup_of_more_ids_than_one_statement_takes(store: QueueStore) -> None:
    if isinstance(store, SqliteQueue):  # as an SQLite built with its old default limit does
        store._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    store.submit("job", "j", lambda n: jobs(n, "a", "b"), 1.0)
    store.settle(JobResult("s1.b", JobStatus.PASSED, "exit 0"), 2.0)
    ids = [f"x{i}" for i in range(1_200)] + ["s1.a", "s1.b", "s1.b"]
    assert store.known(ids) == {"s1.a", "s1.b"}
    assert list(store.settled(ids)) == ["s1.b"]


def test_an_attempt_is_recorded_billed_once_and_settled(store: QueueStore) -> None:
    store.submit("job", "j", lambda n: jobs(n, "a"), 10.0)
    store.start_attempt("s1.a", 1, "inst", 11.0)
    assert [(a.job_id, a.number, a.instance) for a in store.open_attempts()] == [
        ("s1.a", 1, "inst")
    ]
    store.place_attempt("s1.a", 1, "local", {"workdir": "/x", "pid": "7"}, 0.5)
    assert store.attempts("s1.a")[0]["facts"] == {"pid": "7", "usd_per_hour": "0.5000"}
    attempt = Attempt(1, 11.0, 15.0, 0, None, "", "local", 0.25)
    store.end_attempt("s1.a", attempt)
    store.end_attempt("s1.a", attempt)  # replayed after a crash: not billed twice
    assert store.open_attempts() == []
    assert store.ended_attempt("s1.a", 1) == attempt
    store.settle(JobResult("s1.a", JobStatus.PASSED, "exit 0"), 15.0)
    row, _ = store.job("s1.a") or pytest.fail("no job")
    assert (row.status, row.cost_usd, row.attempts, row.first_started_at) == (
        "passed", 0.25, 1, 11.0,
    )  # fmt: skip
    assert store.settled(["s1.a"])["s1.a"][1].status is JobStatus.PASSED
    assert store.spend_since(15.0) == 0.25 and store.spend_since(16.0) == 0.0
    assert store.timing()["run_sum"] == 4.0
    assert store.spend_by_day(0.0) == [(0.0, 0.25)]
    assert store.submission_attempts(1, 10)[0]["job_id"] == "s1.a"


def test_a_requeued_job_keeps_its_retry_state(store: QueueStore) -> None:
    store.submit("job", "j", lambda n: jobs(n, "a"), 10.0)
    store.start_attempt("s1.a", 1, "inst", 11.0)
    store.end_attempt("s1.a", Attempt(1, 11.0, 12.0, 1, FailureKind.TEST_FAILURE, "exit 1"))
    store.requeue("s1.a", 20.0, 1, 0)
    (u,) = store.unsettled()
    assert (u.row.status, u.row.retry_at, u.row.retries_used) == ("queued", 20.0, 1)


def test_pages_and_matches(store: QueueStore) -> None:
    store.submit("pipeline", "p", lambda n: jobs(n, *[f"j{i}" for i in range(5)]), 1.0)
    store.submit("job", "q", lambda n: jobs(n, "odd_%"), 2.0)
    first = store.jobs(None, 0, 2)
    assert [r.id for r in first] == ["s1.j0", "s1.j1"]
    assert [r.id for r in store.jobs(None, first[-1].seq, 2)] == ["s1.j2", "s1.j3"]
    assert [r.id for r, _ in store.job_page(JobMatch(name="_%"), 10)] == ["s2.odd_%"]
    last = store.job_page(JobMatch(before=10**9), 2)
    assert [r.id for r, _ in last] == ["s1.j4", "s2.odd_%"]
    assert store.match_counts(JobMatch(submission=1))["queued"] == 5


def test_a_batch_lands_whole_or_not_at_all(store: QueueStore) -> None:
    store.submit("job", "j", lambda n: jobs(n, "a", "b"), 1.0)
    with pytest.raises(RuntimeError), store.batch():
        store.settle(JobResult("s1.a", JobStatus.CANCELLED, "x"), 2.0)
        raise RuntimeError("half-way")
    assert store.counts()["queued"] == 2
    with store.batch():
        store.settle(JobResult("s1.a", JobStatus.CANCELLED, "x"), 2.0)
        store.settle(JobResult("s1.b", JobStatus.CANCELLED, "x"), 2.0)
    assert store.counts()["cancelled"] == 2


# -- the shared store only -------------------------------------------------------------------


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[QueueStore]:
    with closing(open_queue(pg_url)) as opened:
        yield opened


def test_claims_take_runnable_jobs_by_priority_and_never_twice(pg_store: QueueStore) -> None:
    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a", "b", "hi", "after", needs={"after": "a"}), 1.0)
    for token in ("one", "two"):
        queue.begin_instance(token, 1, "local", 1.0)
    first = [u.job.id for u in queue.claim("one", 2, 5.0)]
    assert first == ["s1.hi", "s1.a"]  # priority first, then submission order
    assert [u.job.id for u in queue.claim("two", 5, 5.0)] == ["s1.b"]  # `after` waits on a
    queue.fenced_start_attempt("s1.a", 1, "one", 6.0)
    queue.fenced_end_attempt("s1.a", Attempt(1, 6.0, 7.0, 0, None, ""), "one")
    queue.fenced_settle(JobResult("s1.a", JobStatus.PASSED, "exit 0"), 7.0, "one")
    assert [u.job.id for u in queue.claim("two", 5, 8.0)] == ["s1.after"]
    assert queue.claim("one", 5, 8.0) == []


def test_a_dead_instances_work_is_taken_once_and_its_late_writes_refused(
    pg_store: QueueStore, pg_url: str
) -> None:
    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a", "b"), 1.0)
    queue.join("dead", 1, "local", 1.0, 60.0)
    queue.join("live", 2, "local", 1.0, 60.0)
    assert len(queue.claim("dead", 2, 2.0)) == 2
    queue.fenced_start_attempt("s1.a", 1, "dead", 3.0)
    expire(pg_url, "dead")
    assert not queue.heartbeat("dead", 60.0)  # expired: it may not come back
    (taken,) = queue.take_dead("live")
    assert queue.take_dead("live") == []  # taken once
    assert taken.token == "dead"
    assert [u.job.id for u in taken.running] == ["s1.a"]
    assert list(taken.open_attempts) == ["s1.a"]
    assert [u.job.id for u in queue.claim("live", 5, 4.0)] == ["s1.b"]  # released to all
    lost = Attempt(1, 3.0, 5.0, 0, None, "")
    with pytest.raises(Exception, match="no longer held"):
        queue.fenced_end_attempt("s1.a", lost, "dead")
    with pytest.raises(Exception, match="no longer held"):
        queue.fenced_settle(JobResult("s1.a", JobStatus.PASSED, ""), 5.0, "dead")
    queue.fenced_end_attempt("s1.a", lost, "live")  # the taker's write lands


def expire(url: str, token: str) -> None:
    """`token`'s lease ran out (as a frozen or killed instance's does), without waiting."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE queue_instances SET expires_at = now() - interval '1 second' WHERE token = %s",
            (token,),
        )


def test_an_instance_whose_lease_expired_claims_nothing(pg_store: QueueStore, pg_url: str) -> None:
    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a", "b"), 1.0)
    queue.join("frozen", 1, "local", 1.0, 60.0)
    assert [u.job.id for u in queue.claim("frozen", 1, 2.0)] == ["s1.a"]
    expire(pg_url, "frozen")  # woken past its ttl, before its heartbeat is refused
    assert queue.claim("frozen", 5, 3.0) == []
    assert queue.claim("never-joined", 5, 3.0) == []
    queue.join("live", 2, "local", 1.0, 60.0)
    assert [u.job.id for u in queue.claim("live", 5, 3.0)] == ["s1.b"]


def test_a_cancel_its_owner_took_and_died_on_is_carried_out_by_the_taker(
    pg_store: QueueStore, pg_url: str
) -> None:
    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a", "b", "c"), 1.0)
    queue.join("dead", 1, "local", 1.0, 60.0)
    queue.claim("dead", 3, 2.0)
    queue.fenced_start_attempt("s1.a", 1, "dead", 3.0)
    assert queue.cancel_elsewhere("s1.a", 4.0) == "cancelling"
    assert queue.cancel_elsewhere("s1.b", 4.0) == "cancelling"  # queued, but held
    assert sorted(queue.cancel_requests("dead")) == ["s1.a", "s1.b"]  # taken ...
    expire(pg_url, "dead")  # ... and then it died before cancelling them
    queue.join("taker", 2, "local", 5.0, 60.0)
    (taken,) = queue.take_dead("taker")
    assert sorted(taken.cancelled) == ["s1.a", "s1.b"]
    assert taken.running == []  # not to retry: cancelled
    assert {r.id: r.status for r in queue.jobs(None, 0, 10)} == {
        "s1.a": "cancelled", "s1.b": "cancelled", "s1.c": "queued",
    }  # fmt: skip
    (attempt,) = queue.attempts("s1.a")
    assert attempt["failure"] == "server_lost" and attempt["finished_at"] is not None
    assert [u.job.id for u in queue.claim("taker", 5, 6.0)] == ["s1.c"]


def test_a_take_over_run_again_after_a_lost_reply_still_names_what_it_cancelled(
    pg_store: QueueStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try committed but its reply was lost: the rerun (same key) must still say
    which jobs it cancelled, or the dead instance's rentals would not be reconciled."""
    import uuid

    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a"), 1.0)
    queue.join("dead", 1, "local", 1.0, 60.0)
    queue.claim("dead", 1, 2.0)
    queue.fenced_start_attempt("s1.a", 1, "dead", 3.0)
    queue.cancel_elsewhere("s1.a", 4.0)
    expire(pg_url, "dead")
    queue.join("taker", 2, "local", 5.0, 60.0)
    same = uuid.uuid4()
    monkeypatch.setattr(uuid, "uuid4", lambda: same)  # both tries carry one key
    (first,) = queue.take_dead("taker")
    (again,) = queue.take_dead("taker")
    assert first.cancelled == again.cancelled == ["s1.a"]


def test_a_cancel_from_any_instance(pg_store: QueueStore) -> None:
    queue = shared(pg_store)
    assert queue is not None
    queue.submit("p", "p", lambda n: jobs(n, "a", "b"), 1.0)
    queue.begin_instance("one", 1, "local", 1.0)
    queue.claim("one", 1, 2.0)
    assert queue.cancel_elsewhere("s1.b", 3.0) == "cancelled"  # nobody held it
    assert queue.cancel_elsewhere("s1.a", 3.0) == "cancelling"  # its owner is asked
    assert queue.cancel_requests("one") == ["s1.a"]
    assert queue.cancel_requests("one") == []
    assert queue.cancel_elsewhere("s1.b", 4.0) == "final:cancelled"
    assert queue.cancel_elsewhere("nope", 4.0) == "unknown"
    assert queue.whereabouts("s1.a").owner == "one"


@pytest.mark.parametrize("skip_locked", [True, False], ids=["locked", "lock-removed"])
def test_instances_claiming_at_once_take_each_job_once(pg_url: str, skip_locked: bool) -> None:
    """Six claimers race over 300 jobs. With the claim's row locks, each job is taken once;
    with them removed the same test sees jobs taken twice (it can fail)."""
    from runner.stores.queue.postgres import PostgresQueue

    seed = PostgresQueue(pg_url)
    seed.submit("p", "p", lambda n: jobs(n, *[f"j{i}" for i in range(300)]), 1.0)
    claimers = [PostgresQueue(pg_url, skip_locked=skip_locked) for _ in range(6)]
    start = threading.Barrier(len(claimers))
    taken: list[list[str]] = [[] for _ in claimers]

    def claim_all(index: int) -> None:
        queue = claimers[index]
        queue.join(f"i{index}", index, "local", 1.0, 60.0)
        start.wait()
        while batch := queue.claim(f"i{index}", 3, 2.0):
            taken[index] += [u.job.id for u in batch]

    threads = [threading.Thread(target=claim_all, args=(i,)) for i in range(len(claimers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [job for mine in taken for job in mine]
    owners = {str(r[0]) for r in seed._select("SELECT owner FROM queue_jobs", ())}
    for queue in (seed, *claimers):
        queue.close()
    if skip_locked:
        assert sorted(every) == sorted(f"s1.j{i}" for i in range(300))  # each once, none lost
        assert len(owners) > 1  # they did race
    else:
        assert len(every) > len(set(every))  # the bug the locks prevent: claimed twice


def test_a_queue_database_of_a_newer_clore_run_is_refused_and_let_go(pg_url: str) -> None:
    open_queue(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE clore_run_schema SET version = 99 WHERE component = 'queue'")
    db = PgDatabase(pg_url, what="queue database", error=QueueError)
    with pytest.raises(QueueError, match="queue schema version 99") as caught:
        db.migrate("queue", MIGRATIONS)
    assert "upgrade clore-run" in str(caught.value.hint)
    assert db._conn is None  # closed: its constructor has nothing to close it with


def test_five_processes_opening_an_empty_queue_database_at_once(pg_url: str) -> None:
    opens = "from runner.stores.queue.postgres import PostgresQueue\nPostgresQueue(url).close()"
    assert open_at_once(pg_url, opens) == [("queue", len(MIGRATIONS))]


def test_a_database_crash_mid_queue_loses_nothing_and_counts_nothing_twice(
    pg_cluster: PgCluster, pg_url: str
) -> None:
    queue = shared(open_queue(pg_url))
    assert queue is not None
    try:
        queue.submit("p", "p", lambda n: jobs(n, "a", "b"), 1.0)
        queue.join("one", 1, "local", 1.0, 60.0)
        (claimed,) = queue.claim("one", 1, 2.0)
        pg_cluster.restart_immediate()  # every backend aborted, crash recovery from WAL
        # Reconnects and lands once. (A sequence skips numbers after a crash: ids stay unique.)
        ((_, c),) = queue.submit("p", "q", lambda n: jobs(n, "c"), 3.0)
        assert queue.counts()["queued"] == 3
        assert queue.heartbeat("one", 60.0)  # its lease survived the crash
        assert [u.job.id for u in queue.claim("one", 5, 4.0)] == ["s1.b", c.id]
        assert claimed.job.id == "s1.a"
    finally:
        queue.close()


def test_a_dashboard_logout_holds_after_a_restart_and_on_every_instance(
    store_target: str,
) -> None:
    """Issue 25: logouts lived in one process's memory, so a kept copy of a logged-out cookie
    worked again after a restart and on another instance."""
    from runner.serve.dashboard.session import Sessions
    from tests.fakes.fake_clock import FakeClock

    clock = FakeClock()
    token = "a-token-of-sixteen+"
    with closing(open_queue(store_target)) as first, closing(open_queue(store_target)) as other:
        here = Sessions(token, clock, first)
        cookie, session = here.issue()
        kept, _ = here.issue()  # another browser's, not logged out
        there = Sessions(token, clock, other)  # another instance, or this one restarted
        assert there.check(cookie) == session
        here.end(session)
        assert here.check(cookie) is None and there.check(cookie) is None
        assert there.check(kept) is not None
    with closing(open_queue(store_target)) as reopened:
        assert Sessions(token, clock, reopened).check(cookie) is None
        # Expired logouts are dropped as new ones come: the table does not grow for ever.
        clock.unix += 13 * 3600
        _, later_session = Sessions(token, clock, reopened).issue()
        Sessions(token, clock, reopened).end(later_session)
        assert not reopened.session_ended(session.nonce)
        assert reopened.session_ended(later_session.nonce)
