"""Giving back: a server nobody will want within a boot goes back at once; one a job will want
soon is kept until then; one up before its job waits a boot for it; fixed hosts stay."""

from __future__ import annotations

from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.rentals import Quote
from tests.core.book_parts import A3090, OFFERS, job, parts, pipeline, releases, timers

TIE_S = 1e-3  # a look just after `until`: a job ending then is told first


def test_an_idle_server_no_job_can_use_within_a_boot_goes_back_at_once() -> None:
    p = parts([job("a", gpu="4090")])
    server = p.up(A3090, now=10.0)
    p.want("a")  # waits, but fits no 3090
    p.giver.give_back(10.0, stopping=False)
    assert [(r.server, r.reason, r.rented) for r in releases(p.said())] == [
        (server.id, "no job waiting can use it within a boot", True)
    ]
    assert not p.fleet.look


def test_an_idle_server_a_waiting_or_retrying_job_fits_is_kept_a_boot() -> None:
    p = parts([job("a")])
    server = p.up(A3090, now=10.0)
    p.want("a")  # waiting, short of money (or past the placement scan)
    p.giver.give_back(10.0, stopping=False)
    assert p.said() == [SetTimer(110.0 + TIE_S, BookTimer(BookWake.LOOK, server.id))]
    q = parts([job("a")])
    server = q.up(A3090, now=10.0)
    q.jobs.retrying.add("a")
    q.giver.give_back(10.0, stopping=False)
    assert q.said() == [SetTimer(110.0 + TIE_S, BookTimer(BookWake.LOOK, server.id))]
    q.fleet.look.add(server.id)
    q.giver.give_back(110.0 + TIE_S, stopping=False)  # a boot later, still unused: back
    assert [r.server for r in releases(q.said())] == [server.id]


def test_kept_for_a_job_ready_soon_unless_another_server_will_be_free_for_it() -> None:
    p = parts(pipeline(job("a"), job("b", "a")))
    server = p.up(A3090)
    p.ends.eta["b"] = 50.0  # b's needs end within a boot, and nothing else is free for it
    p.giver.give_back(0.0, stopping=False)
    assert timers(p.said()) == [SetTimer(100.0 + TIE_S, BookTimer(BookWake.LOOK, server.id))]

    q = parts(pipeline(job("a"), job("b", "a")))
    q.up(A3090)
    q.want("a")
    q.placer.place(0.0)  # a runs until 300 s; b, ready then, follows it there
    assert q.ends.eta["b"] == 300.0
    spare = q.up(OFFERS[1], now=250.0)
    q.fleet.look = {spare.id}
    q.giver.give_back(250.0, stopping=False)
    assert [r.server for r in releases(q.said())] == [spare.id]


def test_keeping_a_server_the_budget_cannot_hold_gives_it_back() -> None:
    p = parts([job("a")], budget_usd=0.01)
    server = p.fleet.rent("x", A3090, 905.0, 0.0, 800.0, ahead=False)  # $0.00875 reserved
    p.fleet.unclaim("x")
    p.fleet.ready(server, 900.0)
    p.want("a")
    p.said()
    p.giver.give_back(950.0, stopping=False)  # kept to 1,000 s: $0.0167
    assert [r.reason for r in releases(p.said())] == [
        "keeping it for the next job would pass the budget"
    ]


def test_a_server_up_before_its_job_waits_a_boot_from_when_the_job_should_be_ready() -> None:
    p = parts(pipeline(job("a"), job("b", "a")))
    server = p.up(A3090, now=10.0)
    p.fleet.claim("b", server)  # rented ahead for b, whose needs end at 200 s
    p.ends.eta["b"] = 200.0
    p.giver.give_back(10.0, stopping=False)
    assert p.said() == [SetTimer(300.0 + TIE_S, BookTimer(BookWake.LOOK, server.id))]
    p.fleet.look.add(server.id)
    p.giver.give_back(300.0 + TIE_S, stopping=False)
    assert [r.reason for r in releases(p.said())] == ["b did not come within a boot"]


def test_a_retry_due_later_moves_the_wait_too() -> None:
    p = parts([job("r")])
    server = p.up(A3090, now=10.0)
    p.fleet.keep_for("r", server)
    p.jobs.retry_at["r"] = 500.0
    p.giver.give_back(10.0, stopping=False)
    assert p.said() == [SetTimer(600.0 + TIE_S, BookTimer(BookWake.LOOK, server.id))]


def test_a_stopping_run_gives_back_all_but_busy_servers_and_fixed_hosts_stay() -> None:
    p = parts([job("a"), job("b")])
    idle = p.up(A3090)
    busy = p.up(OFFERS[1])
    p.fleet.start("a", busy)
    booting = p.fleet.rent("b", OFFERS[2], 1000.0, 0.0, 0.0, ahead=False)
    p.said()
    p.fleet.look = {idle.id, busy.id, booting.id}
    p.giver.give_back(5.0, stopping=True)
    assert [(r.server, r.reason) for r in releases(p.said())] == [
        (idle.id, "the run is stopping"),
        (booting.id, "the run is stopping"),
    ]

    fixed = parts([job("a")], offers=None)
    host = fixed.fleet.add_fixed(Quote("h1"), 0.0)
    fixed.fleet.look.add(host.id)
    fixed.giver.give_back(5.0, stopping=False)
    assert fixed.said() == [] and not fixed.fleet.look
    fixed.fleet.look.add(host.id)
    fixed.giver.give_back(6.0, stopping=True)
    assert [(r.server, r.rented) for r in releases(fixed.said())] == [(host.id, False)]


def test_a_booting_server_nobody_is_meant_for_is_kept_only_for_a_job_that_fits() -> None:
    p = parts([job("a", gpu="4090")])
    booting = p.fleet.rent("gone", A3090, 1000.0, 0.0, 0.0, ahead=True)
    p.fleet.unclaim("gone")
    p.said()
    p.giver.give_back(20.0, stopping=False)
    assert [r.server for r in releases(p.said())] == [booting.id]
