"""The jobs a book knows: ranks, the queue of waiting jobs in key order, raises from jobs
added later, and forgetting a settled job once nothing needs it."""

from __future__ import annotations

from dataclasses import replace

from runner.core.known_jobs import KnownJobs, Unplaceable
from runner.core.model import FailureKind, Priority
from runner.core.rentals import NoMarket, Quote
from runner.core.simulate_market import ModelMarket
from tests.core.book_parts import OFFERS, job, pipeline


def order(jobs: KnownJobs) -> list[str]:
    """Every waiting job, best first, as the queue gives them (then queued again)."""
    seen = []
    while (entry := jobs.pop_waiting()) is not None:
        seen.append(entry)
    jobs.push_back(seen)
    return [e[2] for e in seen]


def test_ranks_are_remaining_paths_and_keys_order_priority_then_path_then_file() -> None:
    jobs = KnownJobs(NoMarket())
    roots = jobs.add(
        pipeline(
            job("a", minutes=1),
            job("b", "a", minutes=10),
            job("c", minutes=5),
            job("d", minutes=1, priority=Priority.HIGH),
            job("e", minutes=5),
        )
    )
    assert roots == ["a", "c", "d", "e"]  # the jobs whose needs are all known: none
    assert jobs.ranks == {"a": 660.0, "b": 600.0, "c": 300.0, "d": 60.0, "e": 300.0}
    assert jobs.records["a"].dependents == {"b": None} and jobs.records["a"].open == 1
    jobs.want("e", 1, 60.0)
    jobs.want("c", 1, 60.0)
    jobs.want("a", 1, 60.0)
    jobs.want("d", 1, 60.0)
    # d first (priority); a before c and e (a longer path); c before e (file order).
    assert order(jobs) == ["d", "a", "c", "e"]
    assert order(jobs) == ["d", "a", "c", "e"]  # pushed back, the same again


def test_stale_entries_are_skipped_and_only_waiting_jobs_pushed_back() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add(pipeline(job("a"), job("b"), job("c")))
    for j in ("a", "b", "c"):
        jobs.want(j, 1, 60.0)
    jobs.want("a", 2, 60.0)  # wanted again: its first entry is stale
    assert len(jobs.queue) == 4
    first = jobs.pop_waiting()
    assert first is not None and first[2] == "a" and jobs.waiting["a"].attempt == 2
    del jobs.waiting["b"]  # placed (or dropped): its entry goes stale
    assert order(jobs) == ["c"]
    jobs.push_back([first])  # a is still waiting: back in
    assert order(jobs) == ["a", "c"]
    assert len(jobs.queue) == 2  # the stale entries were dropped on the way


def test_a_later_batch_raises_the_ranks_of_the_older_jobs_it_needs() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add(pipeline(job("a", minutes=1), job("b", minutes=2)))
    jobs.want("a", 1, 60.0)
    jobs.want("b", 1, 60.0)
    assert order(jobs) == ["b", "a"]
    later = jobs.add([job("c", "a", minutes=30)])
    assert later == []  # its need has no expected end yet
    assert jobs.records["a"].key[1] == -(60.0 + 1800.0)  # raised at once: a job waits
    assert jobs.records["a"].dependents == {"c": None}
    assert order(jobs) == ["a", "b"]


def test_raises_wait_while_no_job_waits_and_are_made_before_a_key_is_read() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add([job("a", minutes=1)])
    jobs.add([job("b", "a", minutes=10)])
    assert jobs.raises == [("a", 600.0)] and jobs.records["a"].key[1] == -60.0
    jobs.want("a", 1, 60.0)  # made before it is queued
    assert jobs.raises == [] and jobs.records["a"].key[1] == -660.0


def test_a_settled_job_is_forgotten_once_no_dependent_wants_more() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add(pipeline(job("a"), job("b", "a"), job("c", "a")))
    jobs.want("a", 1, 60.0)
    record = jobs.settle("a")
    assert record is not None and record.settled and "a" not in jobs.waiting
    jobs.forget_settled("a", record)
    assert "a" in jobs.records  # b and c still need its end and its files
    b = jobs.settle("b")
    assert b is not None
    jobs.forget_settled("b", b)
    assert set(jobs.records) == {"a", "c"}
    assert jobs.records["a"].dependents == {"c": None}
    c = jobs.settle("c")
    assert c is not None
    jobs.forget_settled("c", c)
    assert jobs.records == {}
    assert jobs.settle("gone") is None  # not held: nothing to do


def test_wanting_again_clears_the_retry_and_the_failed_rents_of_the_last_attempt() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add([job("a")])
    jobs.want("a", 1, 60.0)
    jobs.waiting["a"].rent_failures = ("host h1 never came up",)
    del jobs.waiting["a"]
    jobs.retrying.add("a")
    jobs.retry_at["a"] = 30.0
    record = jobs.want("a", 2, 90.0)
    assert (record.attempt, record.timeout_s, record.rent_failures) == (2, 90.0, ())
    assert not jobs.retrying and not jobs.retry_at


def test_a_job_that_gets_no_server_leaves_the_queue_as_unplaceable() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add([job("a")])
    want = jobs.want("a", 3, 60.0)
    jobs.fail("a", want, FailureKind.UNAVAILABLE, "no offer fits")
    assert not jobs.waiting and jobs.pop_waiting() is None
    assert jobs.unplaceable == [Unplaceable("a", 3, FailureKind.UNAVAILABLE, "no offer fits")]


def test_fits_asks_the_market_and_fixed_hosts_fit_every_job() -> None:
    fixed = KnownJobs(NoMarket())
    fixed.add([job("a", gpu="H100")])
    assert fixed.fits(Quote("local"), "a")
    market = KnownJobs(ModelMarket(OFFERS))
    market.add([job("a", gpu="4090"), replace(job("b"), gpu=None)])
    assert market.fits(OFFERS[2], "a") and not market.fits(OFFERS[0], "a")
    assert market.fits(OFFERS[0], "b")  # no GPU asked: any server


def test_known_durations_stand_in_for_estimates() -> None:
    jobs = KnownJobs(NoMarket(), durations_s={"a": 42.0})
    jobs.add([job("a", minutes=5), job("b", minutes=None)])
    assert jobs.records["a"].expected_s == 42.0
    assert jobs.records["b"].expected_s is None


def test_an_entry_of_a_job_placed_meanwhile_is_not_pushed_back() -> None:
    jobs = KnownJobs(NoMarket())
    jobs.add(pipeline(job("a"), job("b")))
    jobs.want("a", 1, 60.0)
    jobs.want("b", 1, 60.0)
    entry = jobs.pop_waiting()
    assert entry is not None and entry[2] == "a"
    del jobs.waiting["a"]  # placed on the server it was popped for
    jobs.push_back([entry])
    assert [e[2] for e in jobs.queue] == ["b"]  # the queue holds no dead weight
