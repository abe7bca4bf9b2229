"""Hedged boots, the book's side: a late boot for a waiting job gets a second host (or a note
saying why not), the first up wins, and a job that starts elsewhere sends its boots back."""

from __future__ import annotations

from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S, Server
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hedging import HEDGE_AGAIN_S
from runner.core.rentals import JobNote, Quote, RentServer, rental_cost_usd
from tests.core.book_parts import A3090, OFFERS, Parts, job, notes, parts, releases, rents

POLICY = HedgePolicy()  # a boot is late after 1.5 expected boots: 150 s here


def booting_for(p: Parts, job_id: str) -> Server:
    server = p.fleet.rent(job_id, A3090, 1000.0, 0.0, 0.0, ahead=False)
    p.hedger.arm(server)
    return server


def test_a_late_boot_for_a_waiting_job_gets_a_second_host() -> None:
    p = parts([job("a")], hedge=POLICY)
    boot = booting_for(p, "a")
    assert p.said()[-1] == SetTimer(150.0, BookTimer(BookWake.HEDGE, boot.id))
    p.want("a")
    p.fleet.to_hedge.append(boot.id)  # the timer came due
    p.hedger.hedge_due(150.0)
    out = p.said()
    cost = rental_cost_usd(OFFERS[1].usd_per_hour, 300.0 + 600.0 + AFTER_SCRIPT_S, 0.0)
    (rent,) = rents(out)
    assert rent == RentServer(rent.server, OFFERS[1], "a", cost, hedge_of=boot.id)
    assert notes(out) == [
        JobNote(
            "a",
            "the boot of RTX 3090 #a1 runs late (150 s): renting RTX 3090 #a2 beside it; "
            "the first to answer SSH runs it",
        )
    ]
    # A hedge is late itself when not online `racing_after_s` after its rent.
    hedge_late = SetTimer(150.0 + POLICY.racing_after_s, BookTimer(BookWake.HEDGE, rent.server))
    assert out[-1] == hedge_late
    assert p.fleet.pairs == {boot.id: rent.server, rent.server: boot.id}


def test_a_boot_not_late_or_for_a_job_not_ready_is_looked_at_later() -> None:
    p = parts([job("a")], hedge=POLICY)
    boot = booting_for(p, "a")
    p.said()
    p.fleet.to_hedge.append(boot.id)
    p.hedger.hedge_due(100.0)  # a timer of an earlier plan: its own comes at 150 s
    assert p.said() == []
    p.fleet.to_hedge.append(boot.id)
    p.hedger.hedge_due(150.0)  # rented ahead: a is not waiting yet
    assert p.said() == [SetTimer(150.0 + HEDGE_AGAIN_S, BookTimer(BookWake.HEDGE, boot.id))]


def test_a_boot_that_cannot_be_hedged_says_why() -> None:
    capped = parts([job("a")], cap=1, hedge=POLICY)
    boot = booting_for(capped, "a")
    capped.want("a")
    capped.fleet.to_hedge.append(boot.id)
    capped.hedger.hedge_due(160.0)
    assert [n.text for n in notes(capped.said())] == [
        "no hedge for the boot of RTX 3090 #a1 (160 s so far): 1 of 1 servers held (the cap)"
    ]
    poor = parts([job("a")], hedge=POLICY, budget_usd=0.1)
    boot = booting_for(poor, "a")
    poor.want("a")
    poor.fleet.to_hedge.append(boot.id)
    poor.hedger.hedge_due(160.0)
    (note,) = notes(poor.said())
    assert "the budget cannot hold a second boot's worst case" in note.text
    assert not rents(poor.said())


def test_the_first_of_a_pair_up_wins_and_the_other_goes_back() -> None:
    p = parts([job("a")], hedge=POLICY)
    boot = booting_for(p, "a")
    hedge = p.fleet.rent_hedge(boot, "a", OFFERS[1], 1000.0, 0.0, 150.0)
    p.said()
    p.fleet.ready(hedge, 170.0)
    p.hedger.won(hedge, 170.0)
    assert [(r.server, r.reason) for r in releases(p.said())] == [
        (boot.id, "hedge: RTX 3090 #a2 answered SSH first")
    ]
    assert p.fleet.claims == {"a": hedge.id} and not p.fleet.pairs


def test_a_pair_whose_other_is_up_too_only_parts() -> None:
    p = parts([job("a")], hedge=POLICY)
    boot = booting_for(p, "a")
    hedge = p.fleet.rent_hedge(boot, "a", OFFERS[1], 1000.0, 0.0, 150.0)
    p.fleet.ready(boot, 160.0)
    p.fleet.ready(hedge, 160.0)
    p.said()
    p.hedger.won(hedge, 160.0)
    assert releases(p.said()) == [] and not p.fleet.pairs


def test_a_job_started_elsewhere_sends_back_its_hedge() -> None:
    p = parts([job("a")], hedge=POLICY)
    boot = booting_for(p, "a")
    hedge = p.fleet.rent_hedge(boot, "a", OFFERS[1], 1000.0, 0.0, 150.0)
    elsewhere = p.up(Quote("a9", "RTX 3090", 1, 0.9))
    p.want("a")
    p.placer.place(200.0)
    out = p.said()
    # The hedge goes back at once; the job's own boot is nobody's now, and is looked at
    # (giving_back.py keeps it only for a job that fits it within a boot).
    assert [(r.server, r.reason) for r in releases(out)] == [
        (hedge.id, "hedge: a started on RTX 3090 #a9")
    ]
    assert boot.claim is None and boot.id in p.fleet.look
    assert p.fleet.on == {"a": elsewhere.id}


def test_no_timer_when_hedging_is_off() -> None:
    p = parts([job("a")], hedge=NO_HEDGE)
    booting_for(p, "a")
    assert [c for c in p.said() if isinstance(c, SetTimer)] == []
