"""A boot's phases in the core: when a boot is given up (dead host or long pull), what the host
history makes of pulls, and hedging that leaves a pull every host shares alone.

BOOT in the book tests: 100 s expected, 300 s allowed; a boot not online is hedged at 150 s.
"""

from __future__ import annotations

from runner.core.hedge import HedgePolicy
from runner.core.hosts import HostEvent, HostMemory, loser_kind, pulls_of
from runner.core.pulls import (
    DEFAULT_DEPLOY_BOUND_S,
    MIN_DEPLOY_BOUND_S,
    BootBounds,
    Pulls,
    boot_bounds,
)
from runner.core.rentals import Quote, RentFailed, ServerDeploying, ServerReady
from tests.core.test_servers import Drive, job, pipeline, run_timers_until

IMG = "pytorch/pytorch:2.5"

# -- when a boot is given up -----------------------------------------------------------------


def test_a_host_not_online_in_its_bound_is_dead_a_deploying_one_has_the_whole_allowance() -> None:
    bounds = BootBounds(up_s=360.0, deploy_s=1200.0)
    assert bounds.allowance_s == 1560.0
    assert bounds.give_up(359.0, online=False) is None
    assert bounds.give_up(360.0, online=False) == "never_up"
    assert bounds.give_up(1000.0, online=True) is None  # its image pulls: alive
    assert bounds.give_up(1560.0, online=True) == "pulling"  # nobody's fault


def test_the_jobs_own_boot_bound_wins_over_both() -> None:
    bounds = BootBounds(up_s=360.0, deploy_s=1200.0, total_s=120.0)
    assert bounds.allowance_s == 120.0 and bounds.online_s == 120.0
    assert bounds.give_up(120.0, online=False) == "never_up"
    assert bounds.give_up(120.0, online=True) == "pulling"


def test_the_deploy_bound_follows_the_images_pulls_and_is_generous_for_one_never_seen() -> None:
    pulls = pulls_of(
        [
            HostEvent("h1", "up", 1.0, 470.0, image=IMG, pull_s=420.0),
            HostEvent("h2", "up", 2.0, 60.0, image=IMG, pull_s=12.0),
            HostEvent("h3", "pulling", 3.0, 900.0, image="huge:1", pull_s=850.0),
            HostEvent("h3", "up", 4.0, 40.0, image="tiny:1", pull_s=5.0),
        ]
    )
    assert pulls.deploy_bound_s("never-seen:1") == DEFAULT_DEPLOY_BOUND_S
    assert pulls.deploy_bound_s(IMG) == 840.0  # twice its slowest pull
    assert pulls.deploy_bound_s("huge:1") == 1700.0  # a pull given up counts, at least
    assert pulls.deploy_bound_s("tiny:1") == MIN_DEPLOY_BOUND_S  # a cache may not hold it
    assert pulls.expected_s(IMG, "h2") == 12.0  # its own
    assert pulls.expected_s(IMG, "h9") == 216.0  # the others' median
    assert pulls.cached(IMG, "h2") and not pulls.cached(IMG, "h1")
    assert boot_bounds(pulls, IMG, 360.0).allowance_s == 1200.0
    assert boot_bounds(pulls, IMG, 360.0, 120.0).allowance_s == 120.0


def test_the_default_image_pulls_inside_the_online_bound_as_every_boot_always_did() -> None:
    pulls = Pulls(default_image="nvidia/cuda:12.8.0-base-ubuntu22.04")
    assert pulls.deploy_bound_s("") == 0.0
    assert pulls.deploy_bound_s("nvidia/cuda:12.8.0-base-ubuntu22.04") == 0.0
    assert pulls.deploy_bound_s(IMG) == DEFAULT_DEPLOY_BOUND_S


# -- the host history --------------------------------------------------------------------------


def test_a_slow_pull_is_a_pull_never_a_failed_boot_and_boots_leave_their_pulls_out() -> None:
    events = [
        HostEvent("h1", "pulling", 10.0, None, image=IMG, pull_s=1500.0),
        HostEvent("h2", "up", 20.0, 470.0, image=IMG, pull_s=420.0),
    ]
    memory = HostMemory.of(events, now=30.0)
    assert memory.skipped() == {}
    assert memory.hosts["h1"].boot_failures == 0 and memory.hosts["h1"].boots == 0
    assert memory.expected_boot_s("h2") == 50.0  # 470 s to SSH, 420 s of it the image's
    assert memory.pulls.deploy_bound_s(IMG) == 3000.0
    assert memory.fail_chance("h1") == memory.fail_chance("never-seen")


def test_a_hedge_loser_not_up_when_the_winner_was_is_slow_and_skipped_for_a_while() -> None:
    memory = HostMemory.of([HostEvent("h1", "slow", 10.0, 60.0)], now=70.0)
    assert memory.hosts["h1"].slow == 1 and memory.hosts["h1"].boot_failures == 1
    why = memory.skip_reason("h1")
    assert why is not None and why.startswith("not up when another host was")


# -- hedging acts on hosts that do not come up, not on pulls ----------------------------------


def test_a_boot_deploying_an_image_never_seen_is_never_hedged() -> None:
    d = Drive(pipeline(job("a", image=IMG)), hedge=HedgePolicy())
    (first,) = d.rents()
    d.at(20.0, ServerDeploying(first.server))  # online at 20 s: its image pulls
    run_timers_until(d, 1200.0)
    assert len(d.rents()) == 1  # a pull every host shares: no second host
    d.at(1200.0, ServerReady(first.server))
    assert d.start_of("a").server == first.server


def test_a_boot_not_online_is_still_hedged_as_before() -> None:
    d = Drive(pipeline(job("a", image=IMG)), hedge=HedgePolicy())
    run_timers_until(d, 150.0)
    first, *hedges = d.rents()
    assert hedges and all(h.hedge_of == first.server for h in hedges)


def test_a_pull_late_by_what_the_image_took_elsewhere_is_hedged() -> None:
    """Its other hosts deployed it in 40 s (their caches held it): 60 s past that is late."""
    d = Drive(pipeline(job("a", image=IMG)), hedge=HedgePolicy())
    d.book.pulls = Pulls({IMG: {"b9": (40.0,), "c9": (40.0,)}})
    (first,) = d.rents()
    d.at(10.0, ServerDeploying(first.server))
    run_timers_until(d, 69.0)
    assert len(d.rents()) == 1
    run_timers_until(d, 70.0)  # online at 10 s + 1.5 x 40 s
    _, hedge = d.rents()
    assert hedge.hedge_of == first.server


# -- dead hosts, faster: more than one hedge once the first boot is late -----------------------


def test_a_boot_late_the_first_time_gets_two_hedges_then_one_at_a_time_up_to_three() -> None:
    policy = HedgePolicy()
    assert [policy.hedges_now(n) for n in (1, 2, 3)] == [2, 1, 0]
    assert HedgePolicy(enabled=False).hedges_now(1) == 0
    assert HedgePolicy(fan_out=1).hedges_now(1) == 1  # the old policy: one at a time


def test_a_late_boot_races_two_hedges_and_the_first_up_sends_back_both_others() -> None:
    d = Drive(pipeline(job("a")), hedge=HedgePolicy())
    run_timers_until(d, 150.0)
    first, h1, h2 = d.rents()
    assert h1.hedge_of == h2.hedge_of == first.server
    assert {h1.quote.host, h2.quote.host} == {"a2", "a3"}
    d.at(170.0, ServerReady(h2.server))
    assert sorted(r.server for r in d.releases()) == [first.server, h1.server]
    assert d.start_of("a").server == h2.server


def test_with_three_racing_the_oldest_not_online_gives_way_to_a_fresh_host() -> None:
    d = Drive(pipeline(job("a")), hedge=HedgePolicy(), offers=d_offers(), cap=4)
    run_timers_until(d, 150.0)
    first, _, _ = d.rents()
    run_timers_until(d, 179.0)
    assert len(d.rents()) == 3 and d.releases() == []
    run_timers_until(d, 180.0)  # the hedges are late 30 s after their rent: three racing
    (gave_way,) = d.releases()
    assert gave_way.server == first.server  # 30 s past its own lateness, not online
    assert gave_way.reason.startswith("hedge: not online after 180 s")
    assert len(d.rents()) == 4  # a fresh host in its place


def test_when_one_racing_boot_fails_a_late_one_gets_a_hedge_in_its_place() -> None:
    d = Drive(pipeline(job("a")), hedge=HedgePolicy(racing_after_s=1e9), offers=d_offers())
    run_timers_until(d, 150.0)
    first, h1, h2 = d.rents()
    d.at(200.0, RentFailed(first.server, "not online after 200 s"))  # gone: two racing
    run_timers_until(d, 300.0)  # h1 and h2 (150 s old) are late: one more, up to three
    assert len(d.rents()) == 4
    assert d.rents()[-1].hedge_of in (h1.server, h2.server)


def d_offers() -> list[Quote]:
    return [Quote(f"a{n}", "RTX 3090", 1, 0.30 + n / 100) for n in range(1, 7)]


def test_a_hedges_loser_is_slow_if_it_had_time_to_come_up_a_pull_if_it_was_deploying() -> None:
    assert loser_kind(60.0, online=False) == "slow"
    assert loser_kind(5.0, online=False) is None  # rented seconds before the winner answered
    assert loser_kind(60.0, online=True) == "pulling"
