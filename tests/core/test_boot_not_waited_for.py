"""A job that starts on a server free first, while a server rented for it still boots, says
so: that boot may run no job (it goes to another job or back), and a person, or the fault
suite's idle-order check, is told why."""

from __future__ import annotations

from runner.core.rentals import JobNote
from tests.core.book_parts import A3090, OFFERS, job, notes, parts, starts


def test_a_job_started_on_a_free_server_names_the_boot_it_did_not_wait_for() -> None:
    p = parts([job("a")])
    booting = p.fleet.rent("a", OFFERS[1], 1000.0, 0.0, 0.0, ahead=False)
    free = p.up(A3090)
    p.said()
    p.want("a")
    p.placer.place(1.0)
    out = p.said()
    assert [s.server for s in starts(out)] == [free.id]
    assert notes(out) == [
        JobNote(
            "a",
            "started on RTX 3090 #a1, free before RTX 3090 #a2 booting for it was up: that "
            "boot goes to another job or back",
        )
    ]
    assert booting.claim is None  # no longer meant for it


def test_a_job_started_on_its_own_server_or_a_hedge_says_nothing_of_the_kind() -> None:
    p = parts([job("a")])
    own = p.up(A3090, for_job="a")
    p.fleet.claim("a", own)
    p.said()
    p.want("a")
    p.placer.place(1.0)
    assert notes(p.said()) == []
