"""A submission's trust domain on the queue's job rows, both halves: written with the jobs,
read back on the row and on the job the core is given, and the default for rows written
before the column existed."""

from __future__ import annotations

from contextlib import closing

import pytest

from runner.core.model import DEFAULT_TRUST, Job
from runner.stores.queue import QueueStore, open_queue, shared
from tests.stores.queue.old_queues import queue_from_before


def _jobs(number: int, trust: str, *names: str) -> list[Job]:
    return [Job(id=f"s{number}.{n}", name=n, run="true", trust=trust) for n in names]


def test_each_job_keeps_its_submissions_domain(store_target: str) -> None:
    with closing(open_queue(store_target)) as store:
        store.submit("pipeline", "p", lambda n: _jobs(n, "repo-acme.models", "a", "b"), 1.0)
        store.submit("pipeline", "q", lambda n: _jobs(n, "fork-pr-x.y-7", "a"), 2.0)
        rows = {row.id: row.trust for row in store.jobs(None, 0, 10)}
        acme, fork = "repo-acme.models", "fork-pr-x.y-7"
        assert rows == {"s1.a": acme, "s1.b": acme, "s2.a": fork}
        assert {u.job.id: u.job.trust for u in store.unsettled()} == rows
        row, _ = store.job("s2.a") or pytest.fail("no job")
        assert row.trust == "fork-pr-x.y-7"


def test_a_claimed_job_carries_its_domain(pg_url: str) -> None:
    queue = shared(open_queue(pg_url))
    assert queue is not None
    with closing(queue):
        queue.submit("pipeline", "p", lambda n: _jobs(n, "team-ml", "a"), 1.0)
        queue.join("one", 1, "local", 1.0, 60.0)
        (claimed,) = queue.claim("one", 1, 2.0)
        assert (claimed.row.trust, claimed.job.trust) == ("team-ml", "team-ml")


def test_jobs_queued_before_the_column_are_of_the_default_domain(store_target: str) -> None:
    queue_from_before(store_target, sqlite_steps=3, pg_steps=4)  # before the trust column
    with closing(open_queue(store_target)) as store:
        (old,) = store.unsettled()
        assert (old.row.trust, old.job.trust) == (DEFAULT_TRUST, DEFAULT_TRUST)
        _check_new_rows_still_written(store)


def _check_new_rows_still_written(store: QueueStore) -> None:
    store.submit("job", "j", lambda n: _jobs(n, "team-a", "b"), 2.0)
    assert [u.job.trust for u in store.unsettled()] == [DEFAULT_TRUST, "team-a"]
