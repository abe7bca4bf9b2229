"""A shared queue with a budget pool claims each job together with a server slot of the pool, in
one transaction (runner/stores/queue/postgres.py, clore_run_claim_room / clore_run_hold_slots): no
job is claimed without a slot, and the slot goes back when the job settles, is requeued, or its
instance is taken over. The job's rental takes its slot over, so its server counts once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from runner.core.model import Attempt, Job, JobResult, JobStatus
from runner.stores.pools import Reservation
from runner.stores.pools.postgres import PostgresPools
from runner.stores.pools.seat import PoolSeat
from runner.stores.queue.postgres import PostgresQueue


def _jobs(number: int, count: int) -> list[Job]:
    return [Job(id=f"s{number}.j{i}", name=f"j{i}", run="true") for i in range(count)]


@pytest.fixture
def pooled(pg_url: str) -> Iterator[tuple[PostgresQueue, PoolSeat, PostgresPools]]:
    admin = PostgresPools(pg_url)
    admin.create("ci", 10.0, per_day=False, max_servers=2)
    queue = PostgresQueue(pg_url)
    seat = PoolSeat(PostgresPools(pg_url), "ci", "me")
    queue.join("me", 1, "clore", 1.0, 60.0)
    queue.claim_slots_from(seat)
    try:
        yield queue, seat, admin
    finally:
        seat.close()
        queue.close()
        admin.close()


def _servers(admin: PostgresPools) -> int:
    return admin.usage("ci").servers


def test_a_claim_takes_no_more_jobs_than_the_pool_has_slots(
    pooled: tuple[PostgresQueue, PoolSeat, PostgresPools],
) -> None:
    queue, _, admin = pooled
    queue.submit("p", "p", lambda n: _jobs(n, 4), 1.0)
    assert [u.job.id for u in queue.claim("me", 5, 2.0)] == ["s1.j0", "s1.j1"]
    assert _servers(admin) == 2
    assert queue.claim("me", 5, 2.0) == []  # the core has room, the pool has none
    queue.fenced_settle(JobResult("s1.j0", JobStatus.PASSED, "exit 0"), 3.0, "me")
    assert _servers(admin) == 1  # a settled job's slot goes back
    queue.fenced_requeue("s1.j1", 9.0, 1, 0, "me")
    assert _servers(admin) == 0  # so does a requeued one's
    assert [u.job.id for u in queue.claim("me", 5, 4.0)] == ["s1.j2", "s1.j3"]
    queue.end_instance("me", 5.0)  # a clean stop gives its queued jobs back, and their slots
    assert _servers(admin) == 0
    kinds = [e.kind for e in admin.events("ci")]
    assert kinds.count("reserve") == kinds.count("settle") == 4


def test_a_rental_takes_its_jobs_slot_over_and_a_kept_server_gives_it_back(
    pooled: tuple[PostgresQueue, PoolSeat, PostgresPools],
) -> None:
    queue, seat, admin = pooled
    queue.submit("p", "p", lambda n: _jobs(n, 3), 1.0)
    queue.claim("me", 2, 2.0)
    never = threading.Event()
    rental = seat.reserve(1.5, "j0's server", never, job_id="s1.j0")
    assert isinstance(rental, Reservation)
    usage = admin.usage("ci")
    assert (usage.servers, usage.reserved_usd) == (2, 1.5)  # one server for j0, not two
    assert seat.grow(rental, 1.0, job_id="s1.j1")  # j1 runs on j0's kept server
    assert _servers(admin) == 1  # j1 needs no server of its own: its slot went back
    assert [u.job.id for u in queue.claim("me", 5, 3.0)] == ["s1.j2"]
    queue.fenced_settle(JobResult("s1.j0", JobStatus.PASSED, "exit 0"), 4.0, "me")
    assert _servers(admin) == 2  # j0's slot was its rental's: the rental settles it, not j0


def test_a_dead_instances_slots_go_back_with_its_jobs(
    pg_url: str, pooled: tuple[PostgresQueue, PoolSeat, PostgresPools]
) -> None:
    queue, _, admin = pooled
    queue.submit("p", "p", lambda n: _jobs(n, 2), 1.0)
    queue.claim("me", 2, 2.0)
    queue.fenced_start_attempt("s1.j0", 1, "me", 3.0)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # its lease ran out
        conn.execute("UPDATE queue_instances SET expires_at = now() - interval '1 second'")
    queue.join("taker", 2, "clore", 3.0, 60.0)
    (taken,) = queue.take_dead("taker")
    assert [u.job.id for u in taken.running] == ["s1.j0"]
    assert _servers(admin) == 0  # the running one's and the queued one's
    lost = Attempt(1, 3.0, 4.0, None, None, "lost")
    queue.fenced_end_attempt("s1.j0", lost, "taker")


@pytest.mark.parametrize("in_claim", [True, False], ids=["in-claim", "reserved-apart"])
def test_claimers_racing_on_a_small_pool_never_claim_a_job_without_a_slot(
    pg_url: str, in_claim: bool
) -> None:
    """Five instances claim and settle 60 jobs on a pool of two servers. With the slots taken
    in the claim's transaction, every claimed job holds one and the pool never counts more
    than two. With the room read before the claim and the slots reserved after it (each in a
    transaction of its own), the same race claims jobs that get no slot (it can fail)."""
    admin = PostgresPools(pg_url)
    admin.create("ci", 100.0, per_day=False, max_servers=2)
    seed = PostgresQueue(pg_url)
    seed.submit("p", "p", lambda n: _jobs(n, 60), 1.0)
    count = 5
    queues = [PostgresQueue(pg_url) for _ in range(count)]
    seats = [PoolSeat(PostgresPools(pg_url), "ci", f"i{i}") for i in range(count)]
    start = threading.Barrier(count)
    slotless: list[str] = []
    settled: list[str] = []

    def work(index: int) -> None:
        queue, token = queues[index], f"i{index}"
        queue.join(token, index, "clore", 1.0, 60.0)
        queue.claim_slots_from(seats[index], in_claim=in_claim)
        start.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seed.counts()["queued"] > 0:
            for u in queue.claim(token, 2, 2.0):
                if not _holds_a_slot(queue, u.job.id):
                    slotless.append(u.job.id)
                queue.fenced_settle(JobResult(u.job.id, JobStatus.PASSED, ""), 3.0, token)
                settled.append(u.job.id)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    events = admin.events("ci")
    usage = admin.usage("ci")
    for seat in seats:
        seat.close()
    for queue in (seed, *queues):
        queue.close()
    admin.close()
    if not in_claim:
        assert slotless, "the twin claimed every job with a slot: the race was not seen"
        return
    assert slotless == []
    assert sorted(settled) == sorted(j.id for j in _jobs(1, 60))  # each once, none lost
    servers = peak = 0
    for event in events:  # numbered under the pool lock: the order of commits
        servers += {"reserve": 1, "grow": 0, "settle": -1}[event.kind]
        peak = max(peak, servers)
    assert peak <= 2 and servers == 0 and usage.servers == 0


def _holds_a_slot(queue: PostgresQueue, job_id: str) -> bool:
    rows = queue._select(
        "SELECT r.settled_at IS NULL FROM queue_jobs j JOIN reservations r ON r.id = j.pool_slot "
        "WHERE j.id = %s",
        (job_id,),
    )
    return bool(rows and rows[0][0])
