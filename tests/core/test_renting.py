"""Renting for ready jobs: when a waiting job rents, what it reserves, and when it waits or
fails instead."""

from __future__ import annotations

import pytest

from runner.core.budget import DAY_S
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S
from runner.core.hedge import HedgePolicy
from runner.core.known_jobs import Unplaceable
from runner.core.model import FailureKind
from runner.core.rentals import Quote, RentFailed, RentServer, rental_cost_usd
from runner.core.renting import MAX_OFFERS_PER_ATTEMPT
from tests.core.book_parts import (
    A3090,
    OFFERS,
    job,
    parts,
    pipeline,
    releases,
    rents,
    timers,
)

WORST_S = 300.0 + 600.0 + AFTER_SCRIPT_S  # the longest boot, the timeout, fetching files


def test_a_waiting_job_rents_the_best_offer_reserving_its_worst_case() -> None:
    p = parts([job("a")], hedge=HedgePolicy())
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    out = p.said()
    cost = rental_cost_usd(0.30, WORST_S, 0.0)
    assert rents(out) == [RentServer(1, A3090, "a", cost, False)]
    assert p.budget.committed_usd(0.0) == pytest.approx(cost)
    assert p.jobs.records["a"].end == 100.0 + 300.0  # an expected boot, then its 5 minutes
    assert timers(out) == [SetTimer(150.0, BookTimer(BookWake.HEDGE, 1))]  # 1.5 boots: hedged then
    p.renter.rent_for_waiting(1.0)
    assert rents(p.said()) == [] and p.jobs.why == {"a": "boot"}  # its server is coming
    assert p.renter.server_wait("a") == "renting a server for it (RTX 3090 #a1), booting"


def test_a_server_busy_until_within_a_boot_is_waited_for_instead() -> None:
    p = parts([job("a"), job("z")])
    server = p.up(A3090)
    p.fleet.start("z", server)
    p.ends.set_end("z", 90.0, 900.0, 0.0)  # free before a new server would be up
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    assert rents(p.said()) == [] and p.jobs.why == {"a": "reuse"}
    assert p.renter.server_wait("a") == "waiting for a server to come free"


def test_a_booting_server_nobody_is_meant_for_is_claimed() -> None:
    p = parts([job("a")])
    ahead = p.fleet.rent("gone", A3090, 1000.0, 0.0, 0.0, ahead=True)
    p.fleet.unclaim("gone")  # rented ahead for a job that went elsewhere
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    assert rents(p.said()) == [RentServer(1, A3090, "gone", 0.0, True)]  # only the first
    assert ahead.claim == "a" and p.jobs.why == {"a": "boot"}


def test_at_the_cap_an_idle_spare_goes_back_to_make_room_else_the_job_waits() -> None:
    p = parts([job("a", gpu="4090")], cap=1)
    p.up(A3090)  # nobody's, and a fits no 3090
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    out = p.said()
    assert [r.reason for r in releases(out)] == ["making room for a job that fits no server held"]
    assert [r.for_job for r in rents(out)] == ["a"]

    busy = parts([job("a", gpu="4090"), job("z", minutes=60)], cap=1)
    server = busy.up(A3090)
    busy.fleet.start("z", server)
    busy.ends.set_end("z", 3600.0, 4000.0, 0.0)
    busy.want("a")
    busy.renter.rent_for_waiting(0.0)
    assert busy.said() == [] and busy.jobs.why == {"a": "cap"}
    assert busy.renter.server_wait("a") == "waiting for a server: 1 of 1 held (the cap)"


def test_short_of_money_rentals_ahead_go_first_then_the_job_fails_if_nothing_is_held() -> None:
    cost = rental_cost_usd(0.30, WORST_S, 0.0)
    p = parts(pipeline(job("a"), job("later")), budget_usd=cost * 1.5)
    ahead = p.fleet.rent("later", OFFERS[1], 2000.0, 0.0, 0.0, ahead=True)
    p.fleet.ready(ahead, 100.0)
    p.said()
    p.want("a")
    p.renter.rent_for_waiting(100.0)
    out = p.said()
    assert [r.server for r in releases(out)] == [ahead.id]  # its money goes to a ready job
    assert [r.for_job for r in rents(out)] == ["a"]

    broke = parts([job("a")], budget_usd=cost / 2)
    broke.want("a")
    broke.renter.rent_for_waiting(0.0)
    (failed,) = broke.jobs.unplaceable
    assert (failed.job_id, failed.failure) == ("a", FailureKind.UNAVAILABLE)
    assert failed.message.startswith("budget $")


def test_a_daily_budget_waits_for_the_next_day_once() -> None:
    cost = rental_cost_usd(0.30, WORST_S, 0.0)
    p = parts([job("a"), job("b")])
    p.budget.per_day(cost * 1.5, cost, 10.0)  # most of today's spent already
    p.want("a", "b")
    p.renter.rent_for_waiting(10.0)
    assert timers(p.said()) == [SetTimer(DAY_S, BookTimer(BookWake.DAY, 1))]  # one timer for both
    assert p.jobs.why == {"a": "budget", "b": "budget"} and not p.jobs.unplaceable
    assert p.renter.server_wait("a") == (
        "waiting for a server: the budget today cannot hold its worst case yet"
    )


def test_a_job_whose_only_offer_is_being_released_waits_for_it() -> None:
    p = parts([job("a"), job("b")], offers=[A3090])
    server = p.up(A3090)
    p.fleet.release(server, 10.0, "done")
    p.want("a")
    p.renter.rent_for_waiting(10.0)
    assert rents(p.said()) == [] and p.jobs.why == {"a": "release"}
    assert p.renter.server_wait("a") == "waiting for a server being given back to be released"
    p.fleet.released(server.id, None)
    p.renter.rent_for_waiting(20.0)
    assert [r.quote.host for r in rents(p.said())] == ["a1"]


def test_no_offer_fails_the_job_with_why_and_the_hosts_that_failed_it() -> None:
    p = parts([job("a", gpu="H100")])
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    assert [u.failure for u in p.jobs.unplaceable] == [FailureKind.UNAVAILABLE]
    p = parts([job("a", gpu="4090")])
    p.want("a")
    p.jobs.waiting["a"].rent_failures = ("b1: never came up", "b2: sshd never answered")
    p.fleet.excluded.exclude("b1", 0.0)
    p.fleet.excluded.exclude("b2", 0.0)
    p.renter.rent_for_waiting(0.0)
    (failed,) = p.jobs.unplaceable
    assert failed.failure is FailureKind.PROVISIONING_FAILED
    assert failed.message.startswith("2 offers failed to start: b1: never came up; b2: sshd")


def test_failed_rents_fail_the_job_after_the_last_offer_it_may_try() -> None:
    many = [Quote(f"x{i}", "RTX 3090", 1, 1.0 + i) for i in range(MAX_OFFERS_PER_ATTEMPT + 1)]
    p = parts([job("a")], offers=many)
    p.want("a")
    for i in range(MAX_OFFERS_PER_ATTEMPT):
        p.renter.rent_for_waiting(float(i))
        (rent,) = rents(p.said())
        server = p.fleet.servers[rent.server]
        event = RentFailed(rent.server, f"failed {i}")
        p.fleet.rent_failed(server, event, float(i))
        p.renter.rent_failed(server, event)
    (failed,) = p.jobs.unplaceable
    assert failed == Unplaceable(
        "a", 1, FailureKind.PROVISIONING_FAILED, "5 offers failed to start; last: failed 4"
    )


def test_a_rent_no_host_can_serve_fails_the_job_and_one_ahead_fails_nothing() -> None:
    p = parts([job("a"), job("later")])
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    server = p.fleet.servers[rents(p.said())[0].server]
    event = RentFailed(server.id, "the pool is over its limit", job_cannot_run=True)
    p.fleet.rent_failed(server, event, 1.0)
    p.renter.rent_failed(server, event)
    assert [(u.job_id, u.failure) for u in p.jobs.unplaceable] == [("a", FailureKind.UNAVAILABLE)]
    ahead = p.fleet.rent("later", A3090, 1000.0, 0.0, 0.0, ahead=True)
    p.fleet.rent_failed(ahead, RentFailed(ahead.id, "x"), 2.0)
    p.renter.rent_failed(ahead, RentFailed(ahead.id, "x"))
    assert len(p.jobs.unplaceable) == 1  # later rents once it is ready


def test_server_wait_for_jobs_not_waiting_and_on_fixed_hosts() -> None:
    p = parts([job("a")], offers=None)
    assert p.renter.server_wait("a") is None
    p.want("a")
    assert p.renter.server_wait("a") == "a free slot"
    q = parts([job("a")])
    q.want("a")
    assert q.renter.server_wait("a") == "waiting for a server"
