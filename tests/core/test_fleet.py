"""The fleet: each server's life as explicit states, who each is meant for, and the money each
holds, changed only by the fleet's own methods."""

from __future__ import annotations

import pytest

from runner.core.budget import Budget
from runner.core.fleet import (
    BOOTING,
    BUSY,
    GONE,
    IDLE,
    RELEASING,
    Exclusions,
    Fleet,
    Server,
    label,
)
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
)

Q1 = Quote("h1", "RTX 3090", 1, 0.36)
Q2 = Quote("h2", "RTX 3090", 1, 0.72)
Q3 = Quote("h3", "RTX 4090", 2, 1.00)


def fleet(budget_usd: float | None = None) -> tuple[Fleet, list[CoreCommand], list[int]]:
    out: list[CoreCommand] = []
    freed: list[int] = []
    made = Fleet(Budget(budget_usd), out, BootTimes(default_s=100.0, allowance_s=300.0))
    made.on_free = lambda: freed.append(1)
    return made, out, freed


def test_a_rental_goes_booting_idle_busy_idle_releasing_gone() -> None:
    f, out, freed = fleet()
    s = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    assert (s.state, s.claim, s.rented_for, f.claims) == (BOOTING, "a", "a", {"a": s.id})
    assert out == [RentServer(s.id, Q1, "a", 0.1, False)]
    assert f.budget.committed_usd(0.0) == pytest.approx(0.1)  # reserved before the rent
    assert s.id in f.rented and s.id not in f.idle

    f.ready(s, 40.0)
    assert (s.state, s.idle_since) == (IDLE, 40.0)
    assert f.idle == {s.id: s} and s.id in f.look
    assert f.boot.expected_s == 40.0  # the boot seen is learned

    f.unclaim("a")  # as placement does before the job starts on its own server
    f.start("a", s)
    assert (s.state, s.job, s.rented_for, f.on) == (BUSY, "a", None, {"a": s.id})
    assert not f.idle and s.id not in f.look

    assert f.job_ended("a", 100.0) is s
    assert (s.state, s.job, s.last_job, s.idle_since) == (IDLE, None, "a", 100.0)
    assert f.idle == {s.id: s} and not f.on
    assert f.job_ended("a", 101.0) is None  # it runs nowhere now

    out.clear()
    f.release(s, 110.0, "done")
    assert s.state is RELEASING and f.releasing == {s.id: s}
    assert not f.servers and not f.idle and not f.rented
    assert f.hosts_held() == {"h1"}  # not rented again until the release is confirmed
    assert out == [ReleaseServer(s.id, "done", True)] and freed == [1]

    f.released(s.id, 0.05)
    assert s.state is GONE and not f.releasing and f.hosts_held() == set()
    assert f.budget.spent_usd == pytest.approx(0.05)  # the provider's own figure


def test_a_fixed_host_is_idle_from_the_start_and_gone_when_given_back() -> None:
    f, out, freed = fleet()
    s = f.add_fixed(Q1, 0.0)
    assert s.state is IDLE and not s.rented and f.idle == {s.id: s}
    f.start("a", s)
    assert f.fixed_busy == 1 and not f.rented  # held for a person only while it runs a job
    f.job_ended("a", 5.0)
    assert f.fixed_busy == 0
    f.start("b", s)
    f.release(s, 6.0, "the run is over")
    assert s.state is GONE and f.fixed_busy == 0 and not f.releasing  # nothing to confirm
    assert out == [ReleaseServer(s.id, "the run is over", False)] and freed == [1]


@pytest.mark.parametrize(
    ("event", "blamed"),
    [
        (RentFailed(1, "never came up", cost_usd=0.02), True),
        (RentFailed(1, "price moved", requote=True), False),
        (RentFailed(1, "pool is over its limit", job_cannot_run=True), False),
        (RentFailed(1, "no balance", fatal=True), False),
    ],
)
def test_a_failed_rent_is_gone_and_its_host_blamed_only_for_its_own_fault(
    event: RentFailed, blamed: bool
) -> None:
    f, _, freed = fleet()
    s = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    f.plan_after("b", s)
    f.rent_failed(s, event, 10.0)
    assert s.state is GONE and not f.servers and not f.rented
    assert f.claims == {}  # neither the job it was for nor the one planned after it
    assert ("h1" in f.excluded.hosts) is blamed
    assert ("h1" in f.not_to_rent()) is blamed
    assert f.budget.spent_usd == pytest.approx(event.cost_usd)
    assert freed == []  # it never held a slot's server


def test_a_lost_server_is_given_back_and_its_host_excluded() -> None:
    f, out, _ = fleet()
    s = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    f.ready(s, 10.0)
    out.clear()
    f.lost(s, 20.0, "outbid")
    assert s.state is RELEASING and "h1" in f.excluded.hosts
    assert out == [ReleaseServer(s.id, "lost: outbid", True)]


def test_exclusions_are_forgiven_only_when_asked_oldest_first() -> None:
    never = Exclusions()
    never.exclude("h1", 0.0)
    never.forgive(1e9)
    assert never.hosts == {"h1"}  # a run never tries a failed host again

    queue = Exclusions()
    queue.forgive_after_s = 100.0
    queue.exclude("h1", 0.0)
    queue.exclude("h2", 50.0)
    queue.exclude("h1", 60.0)  # failed again: forgiven from the later failure
    queue.forgive(120.0)
    assert queue.hosts == {"h1", "h2"}
    queue.forgive(155.0)
    assert queue.hosts == {"h1"}
    queue.forgive(160.0)
    assert queue.hosts == set()


def test_a_claim_moves_and_the_next_planned_job_takes_the_server() -> None:
    f, _, _ = fleet()
    s1 = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    s2 = f.rent("c", Q2, 1000.0, 0.1, 0.0, ahead=False)
    f.unclaim("c")  # rented ahead for c, which went elsewhere: nobody's now
    f.plan_after("b", s1)
    assert (s1.claim, s1.after, f.claimed("b")) == ("a", ["b"], s1)
    f.claim("a", s2)  # a goes elsewhere: b is next on s1
    assert (s1.claim, s1.after, s2.claim) == ("b", [], "a")
    assert f.claims == {"a": s2.id, "b": s1.id}
    assert s1.id in f.look  # the one it left may no longer be wanted
    f.plan_after("d", s2)
    f.unclaim("d")  # a follower leaves the list, the claim stays
    assert (s2.claim, s2.after) == ("a", [])
    f.unclaim("nobody")  # nothing meant for it: nothing changes
    assert f.claims == {"a": s2.id, "b": s1.id}


def test_a_swap_gives_each_job_the_others_server_with_its_followers() -> None:
    f, _, _ = fleet()
    theirs = f.rent("x", Q1, 1000.0, 0.1, 0.0, ahead=False)  # rented for x, up first
    mine = f.rent("y", Q2, 1000.0, 0.1, 0.0, ahead=False)  # rented for y, still booting
    f.plan_after("x2", theirs)
    f.plan_after("y2", mine)
    f.swap("y", "x", theirs)  # y takes x's server; x takes y's
    assert (mine.claim, mine.rented_for, mine.after) == ("x", "x", ["x2"])
    assert (theirs.claim, theirs.after) == ("y2", [])  # y runs on it now: y2 is next there
    assert f.claims == {"x": mine.id, "x2": mine.id, "y2": theirs.id}


def test_a_server_kept_for_a_retry_belongs_to_that_job_alone() -> None:
    f, _, _ = fleet()
    s = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    f.plan_after("b", s)
    other = f.rent("r", Q2, 1000.0, 0.1, 0.0, ahead=False)
    f.keep_for("r", s)
    assert (s.claim, s.kept_for, s.after) == ("r", "r", [])
    assert f.claims == {"r": s.id}  # a and b plan again; r's old server is free
    assert other.claim is None
    f.unclaim("r")
    assert s.kept_for is None


def test_a_hedged_pair_leaves_the_job_with_the_boot_that_stays() -> None:
    f, out, _ = fleet()
    boot = f.rent("a", Q1, 1000.0, 0.1, 0.0, ahead=False)
    hedge = f.rent_hedge(boot, "a", Q2, 1000.0, 0.2, 60.0)
    assert out[-1] == RentServer(hedge.id, Q2, "a", 0.2, hedge_of=boot.id)
    assert f.pairs == {boot.id: hedge.id, hedge.id: boot.id}
    assert (hedge.claim, f.claims) == ("a", {"a": boot.id})  # the claim stays on the boot
    f.release(boot, 70.0, "hedge lost")
    assert f.pairs == {} and f.claims == {"a": hedge.id}
    assert f.to_hedge == [hedge.id]  # alone now: hedged again at once if it runs late


def test_views_say_booting_and_rented_for_only_while_meant_for_that_job() -> None:
    f, _, _ = fleet()
    s = f.rent("a", Q3, 1000.0, 0.1, 0.0, ahead=False)
    fixed = f.add_fixed(Q1, 0.0)
    (v, w) = sorted(f.views(), key=lambda v: v.quote.host)
    assert (w.id, w.booting, w.rented, w.claim, w.rented_for) == (s.id, True, True, "a", "a")
    assert (v.id, v.booting, v.rented) == (fixed.id, False, False)
    f.claim("b", s)  # meant for another now: not "rented for" a any more
    assert next(v for v in f.views() if v.id == s.id).rented_for is None
    assert [v.id for v in f.idle_views()] == [fixed.id]
    assert label(Q3) == "2x RTX 4090 #h3" and label(Quote("h4")) == "server #h4"


def test_a_server_is_a_record_with_slots() -> None:
    s = Server(1, Q1, True, 0.0)
    assert s.state is BOOTING
    with pytest.raises(AttributeError):
        s.other = 1  # type: ignore[attr-defined]
