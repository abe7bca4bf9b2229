"""Renting ahead: a due job is planned onto a server that will be free for it, or a server is
rented for it now, only when it would otherwise wait for a boot."""

from __future__ import annotations

from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S
from runner.core.rentals import RentServer, rental_cost_usd
from tests.core.book_parts import A3090, OFFERS, Parts, job, parts, pipeline, rents, timers


def running(p: Parts, job_id: str, end: float, worst: float) -> None:
    """`job_id` runs on a 3090 that is up, expected to end at `end`."""
    server = p.up(A3090)
    p.fleet.start(job_id, server)
    p.ends.set_end(job_id, end, worst, 0.0)


def test_a_job_is_planned_after_its_need_on_the_server_that_runs_it() -> None:
    p = parts(pipeline(job("a"), job("b", "a")))
    running(p, "a", 300.0, 1000.0)
    assert timers(p.said()) == [SetTimer(200.0, BookTimer(BookWake.AHEAD, "b"))]  # a boot before
    p.ends.due["b"] = None  # the timer came due
    p.ahead.rent_ahead(200.0)
    assert p.said() == []  # nothing rented: the server a runs on is b's next
    (server,) = p.fleet.servers.values()
    assert p.fleet.claims == {"b": server.id} and server.claim == "b"
    assert p.jobs.records["b"].end == 300.0 + 300.0
    assert p.jobs.records["b"].worst_end == 1000.0 + 600.0 + AFTER_SCRIPT_S


def test_a_job_no_held_server_fits_rents_ahead_for_its_needs_worst_end() -> None:
    p = parts(pipeline(job("a"), job("b", "a", gpu="4090")))
    running(p, "a", 300.0, 1000.0)
    p.said()
    p.ends.due["b"] = None
    p.ahead.rent_ahead(200.0)
    hold_s = (1000.0 - 200.0) + 600.0 + AFTER_SCRIPT_S  # until a's worst end, then b's
    cost = rental_cost_usd(OFFERS[2].usd_per_hour, hold_s, 0.0)
    assert rents(p.said()) == [RentServer(2, OFFERS[2], "b", cost, True)]
    assert p.jobs.records["b"].end == 300.0 + 300.0


def test_a_server_busy_past_a_new_boot_is_not_waited_for() -> None:
    p = parts(pipeline(job("long", minutes=60), job("c"), job("b", "c")))
    running(p, "long", 3600.0, 4000.0)
    p.ends.set_end("c", 100.0, 1000.0, 0.0)  # b ready in 100 s: one boot from now
    assert p.ends.due == {"b": None}
    p.said()
    p.ahead.rent_ahead(0.0)
    assert [(r.quote.host, r.for_job, r.ahead) for r in rents(p.said())] == [("a2", "b", True)]


def test_at_the_cap_a_due_job_starves_until_a_slot_opens() -> None:
    p = parts(pipeline(job("a"), job("b", "a", gpu="4090")), cap=1)
    running(p, "a", 300.0, 1000.0)
    p.said()
    p.ends.due["b"] = None
    p.ahead.rent_ahead(200.0)
    assert p.said() == [] and p.ends.starved == {"b": None} and not p.ends.due


def test_a_rent_ahead_never_takes_money_a_ready_job_may_need() -> None:
    p = parts(pipeline(job("a"), job("b", "a", gpu="4090")), budget_usd=0.3)
    running(p, "a", 300.0, 1000.0)
    p.said()
    p.ends.due["b"] = None
    p.ahead.rent_ahead(200.0)
    assert p.said() == [] and not p.ends.starved  # it rents (or fails) once it is ready


def test_needs_later_than_first_thought_set_a_new_timer() -> None:
    p = parts(pipeline(job("a"), job("b", "a", gpu="4090")))
    running(p, "a", 300.0, 1000.0)
    p.said()
    p.jobs.records["a"].end = 900.0  # a runs longer than it was expected to
    p.ends.due["b"] = None
    p.ahead.rent_ahead(200.0)
    assert p.said() == [SetTimer(800.0, BookTimer(BookWake.AHEAD, "b"))]
    assert p.ends.eta["b"] == 900.0


def test_jobs_ready_or_already_planned_are_skipped() -> None:
    p = parts(pipeline(job("a"), job("b", "a", gpu="4090"), job("c", "a", gpu="4090")))
    running(p, "a", 300.0, 1000.0)
    p.said()
    p.want("b")  # ready now: it rents as a waiting job
    p.ends.due.update({"b": None, "c": None})
    booting = p.fleet.rent("c", OFFERS[3], 2000.0, 0.0, 0.0, ahead=True)
    p.said()
    p.ahead.rent_ahead(200.0)
    assert p.said() == [] and not p.ends.due and booting.claim == "c"


def test_a_job_is_planned_after_the_job_a_booting_server_is_meant_for() -> None:
    p = parts(pipeline(job("a"), job("c", gpu="4090"), job("b", "a", gpu="4090")))
    running(p, "a", 450.0, 1000.0)
    booting = p.fleet.rent("c", OFFERS[2], 2000.0, 0.0, 0.0, ahead=False)
    p.ends.plan_end("c", 100.0, 300.0, 0.0)  # c: up at 100 s, done at 400 s
    p.said()
    p.ends.due["b"] = None
    p.ahead.rent_ahead(350.0)  # b ready at 450 s: c's server is free before then
    assert p.said() == [] and (booting.claim, booting.after) == ("c", ["b"])
    assert p.fleet.claims["b"] == booting.id
    assert p.jobs.records["b"].end == 450.0 + 300.0
