"""Placement: which waiting job a ready server runs, and when a job may take a server rented
for another."""

from __future__ import annotations

from runner.core.fleet import BUSY
from runner.core.rentals import Quote, StartOn
from tests.core.book_parts import A3090, B4090, OFFERS, Parts, job, parts, pipeline, starts


def test_a_ready_server_runs_the_best_ranked_waiting_job_it_fits() -> None:
    p = parts(pipeline(job("a", minutes=5), job("b", gpu="4090", minutes=30), job("c", minutes=10)))
    p.want("a", "b", "c")
    server = p.up(A3090)
    p.placer.place(0.0)
    assert starts(p.said()) == [StartOn("c", 1, server.id, 600.0)]  # b fits no 3090
    assert (server.state, p.fleet.on, list(p.jobs.waiting)) == (BUSY, {"c": server.id}, ["a", "b"])
    assert p.jobs.records["c"].end == 600.0  # renting plans with its expected end


def warm_case(longer_s: float) -> tuple[Parts, int]:
    """a ran on the server; b needs a (warm there), c waits with a path `longer_s` longer."""
    p = parts(pipeline(job("a"), job("b", "a", minutes=5), job("c", minutes=5 + longer_s / 60)))
    server = p.up(A3090)
    p.fleet.start("a", server)
    p.fleet.job_ended("a", 10.0)
    p.want("c", "b")
    p.placer.place(10.0)
    return p, server.id


def test_the_job_warm_on_a_server_wins_a_near_tie_but_not_a_longer_path() -> None:
    p, server_id = warm_case(longer_s=5.0)  # within a tenth of a boot (100 s)
    assert starts(p.said()) == [StartOn("b", 1, server_id, 600.0)]
    p, server_id = warm_case(longer_s=30.0)
    assert starts(p.said()) == [StartOn("c", 1, server_id, 600.0)]


def test_a_server_kept_for_a_retry_runs_that_job_only() -> None:
    p = parts(pipeline(job("r"), job("other", minutes=60)))
    server = p.up(A3090)
    p.fleet.keep_for("r", server)
    p.want("other")
    p.placer.place(0.0)
    assert starts(p.said()) == []  # r is not waiting yet: the server waits for it
    p.want("r")
    p.placer.place(1.0)
    assert starts(p.said()) == [StartOn("r", 1, server.id, 600.0)]


def test_a_job_takes_a_server_rented_for_another_only_when_the_two_can_swap() -> None:
    p = parts(pipeline(job("x", minutes=5), job("y", minutes=30)))
    sx = p.fleet.rent("x", A3090, 1000.0, 0.0, 0.0, ahead=False)
    sy = p.fleet.rent("y", OFFERS[1], 1000.0, 0.0, 0.0, ahead=False)
    p.fleet.ready(sx, 50.0)
    p.want("x", "y")
    p.placer.place(50.0)
    assert starts(p.said()) == [StartOn("y", 1, sx.id, 600.0)]  # y's boot fits x instead
    assert (sy.claim, sy.rented_for, p.fleet.claims) == ("x", "x", {"x": sy.id})


def test_a_job_does_not_take_a_server_when_the_other_would_rent_again() -> None:
    p = parts(pipeline(job("x", gpu="3090", minutes=5), job("y", gpu="RTX", minutes=30)))
    sx = p.fleet.rent("x", A3090, 1000.0, 0.0, 0.0, ahead=False)
    p.fleet.rent("y", B4090, 1000.0, 0.0, 0.0, ahead=False)  # fits y, not x
    p.fleet.ready(sx, 50.0)
    p.want("x", "y")
    p.placer.place(50.0)
    assert starts(p.said()) == [StartOn("x", 1, sx.id, 600.0)]


def test_a_job_whose_time_the_budget_cannot_hold_is_passed_over() -> None:
    p = parts(pipeline(job("long", minutes=60), job("short", minutes=1)), budget_usd=0.2)
    server = p.up(A3090)  # $0.30 an hour, reserved for 1,000 s
    p.want("long", timeout_s=3600.0)
    p.want("short", timeout_s=60.0)
    p.placer.place(0.0)
    assert starts(p.said()) == [StartOn("short", 1, server.id, 60.0)]
    assert p.jobs.why == {"long": "budget"}


def test_no_more_than_the_cap_run_and_fixed_hosts_plan_no_ends() -> None:
    p = parts(pipeline(job("a"), job("b"), job("c")), cap=2, offers=None)
    for host in ("h1", "h2", "h3"):
        p.fleet.add_fixed(Quote(host), 0.0)
    p.want("a", "b", "c")
    p.placer.place(0.0)
    assert [s.job_id for s in starts(p.said())] == ["a", "b"]
    assert p.jobs.records["a"].end is None
    assert p.fleet.fixed_busy == 2 and list(p.jobs.waiting) == ["c"]


def test_a_job_takes_a_server_rented_ahead_for_a_job_not_ready_which_follows_it() -> None:
    """F9: j2 needs j1; j1's own boot was given up while the server rented ahead for j2 is
    up. j1 takes it (else it would wait for ever beside it), and j2 stays its next job."""
    p = parts(pipeline(job("j1"), job("j2", "j1")))
    ahead = p.fleet.rent("j2", A3090, 1000.0, 0.0, 0.0, ahead=True)
    p.fleet.ready(ahead, 50.0)
    p.want("j1")
    p.placer.place(50.0)
    assert starts(p.said()) == [StartOn("j1", 1, ahead.id, 600.0)]
    assert (ahead.claim, p.fleet.claims) == ("j2", {"j2": ahead.id})


def test_a_job_that_takes_a_server_rented_ahead_leaves_its_own_boot() -> None:
    p = parts(pipeline(job("j1", gpu="RTX"), job("j2", "j1", gpu="3090")))
    ahead = p.fleet.rent("j2", A3090, 1000.0, 0.0, 0.0, ahead=True)
    own = p.fleet.rent("j1", B4090, 1000.0, 0.0, 0.0, ahead=False)  # booting; fits no j2
    p.fleet.ready(ahead, 50.0)
    p.want("j1")
    p.placer.place(50.0)
    assert starts(p.said()) == [StartOn("j1", 1, ahead.id, 600.0)]
    assert own.claim is None and p.fleet.claims == {"j2": ahead.id}  # giving back decides
