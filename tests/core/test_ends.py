"""Expected ends: the first known end of each need counts towards its dependents, which are
due a server one expected boot before their needs end."""

from __future__ import annotations

import math

import pytest

from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S
from runner.core.rentals import Provisioning
from tests.core.book_parts import A3090, job, parts, pipeline, timers

DIAMOND = pipeline(job("a"), job("b"), job("c", "a", "b", timeout_s=500.0))


def test_a_job_is_due_one_boot_before_its_last_need_ends() -> None:
    p = parts(DIAMOND)  # boot: 100 s expected
    p.ends.set_end("a", 300.0, 900.0, 0.0)
    assert p.jobs.records["c"].ends_known == 1 and "c" not in p.ends.eta
    p.ends.set_end("a", 350.0, 900.0, 0.0)  # a later estimate is not a second need
    assert p.jobs.records["c"].ends_known == 1
    p.ends.set_end("b", 400.0, 950.0, 0.0)
    assert p.ends.eta == {"a": 0.0, "b": 0.0, "c": 400.0}
    assert timers(p.said()) == [SetTimer(300.0, BookTimer(BookWake.AHEAD, "c"))]
    assert not p.ends.due


def test_a_job_whose_needs_end_within_a_boot_is_due_at_once() -> None:
    p = parts(DIAMOND)
    p.ends.set_end("a", 50.0, 900.0, 0.0)
    p.ends.set_end("b", 90.0, 900.0, 0.0)
    assert p.ends.due == {"c": None} and not timers(p.said())


def test_on_demand_plans_no_rent_ahead_and_fixed_hosts_keep_no_ends() -> None:
    on_demand = parts(DIAMOND, provisioning=Provisioning.ON_DEMAND)
    on_demand.ends.set_end("a", 50.0, 900.0, 0.0)
    on_demand.ends.set_end("b", 90.0, 900.0, 0.0)
    assert on_demand.ends.eta["c"] == 90.0  # known, for giving back
    assert not on_demand.ends.due and not timers(on_demand.said())

    fixed = parts(DIAMOND, offers=None)
    fixed.ends.set_end("a", 50.0, 900.0, 0.0)
    assert fixed.jobs.records["a"].end is None and fixed.jobs.records["c"].ends_known == 0
    assert fixed.ends.end_of("a") == math.inf


def test_worst_ends_only_grow_and_a_plan_adds_timeout_and_fetch_to_the_worst_start() -> None:
    p = parts(DIAMOND)
    p.ends.set_end("a", 300.0, 900.0, 0.0)
    p.ends.set_end("a", 300.0, 800.0, 0.0)
    assert p.ends.worst_of("a") == 900.0
    p.ends.set_end("b", 100.0, 1000.0, 0.0)
    p.ends.plan_end("c", 400.0, 500.0, 0.0)
    record = p.jobs.records["c"]
    assert record.end == 400.0 + 300.0  # the start and its 5 minutes
    assert record.worst_end == 1000.0 + 500.0 + AFTER_SCRIPT_S  # its needs' worst, then it
    with pytest.raises(KeyError):
        parts(DIAMOND).ends.worst_of("c")  # never planned: a caller's bug, said loudly


def test_jobs_waiting_running_or_settled_are_not_planned_ahead() -> None:
    p = parts(pipeline(job("a"), job("b", "a"), job("c", "a"), job("d", "a")))
    p.want("b")
    server = p.up(A3090)
    p.fleet.start("c", server)
    p.jobs.settle("d")
    p.ends.set_end("a", 50.0, 900.0, 0.0)
    assert "b" not in p.ends.eta and "c" not in p.ends.eta and "d" not in p.ends.eta


def test_a_starved_job_is_due_again_when_a_slot_opens_and_ready_ends_the_plan() -> None:
    p = parts(DIAMOND)
    p.ends.starved["c"] = None
    p.ends.wake_starved()
    assert p.ends.due == {"c": None} and not p.ends.starved
    p.ends.eta["c"] = 10.0
    p.ends.ready("c")
    assert not p.ends.due and "c" not in p.ends.eta
    p.ends.starved["c"] = None
    p.ends.drop("c")
    assert not p.ends.starved


def test_needs_end_is_now_without_needs_and_the_latest_need_else() -> None:
    p = parts(DIAMOND)
    assert p.ends.needs_end("a", 7.0) == 7.0
    with pytest.raises(KeyError):
        p.ends.needs_end("c", 0.0)  # a need with no end yet: never asked so
    p.ends.set_end("a", 30.0, 900.0, 0.0)
    p.ends.set_end("b", 20.0, 900.0, 0.0)
    assert p.ends.needs_end("c", 0.0) == 30.0
