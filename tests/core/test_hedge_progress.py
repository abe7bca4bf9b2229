"""Hedging always makes progress: a ring of hedges among dead hosts ends (the job starts, or
no host is left to try), never re-renting the hosts it gave up on.

The simulations here are bounded by events (`max_events`): a core caught in a loop raises
`SimulationStuck` at once, it cannot hang the test run.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.events import BookTimer, BookWake, SetTimer, TimerFired
from runner.core.hedge import HedgePolicy
from runner.core.model import RunStatus
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import CoreCommand, Quote, ServerReleased
from runner.core.servers import ServerBook
from runner.core.simulate_market import (
    HEALTHY_BOOT_S,
    MarketModel,
    ModelMarket,
    SimulationStuck,
    simulate_servers,
)
from tests.core.test_servers import BOOT, Drive, job, pipeline

# One job needs a few dozen events; a run that makes this many is caught in a loop.
ONE_JOB_EVENTS = 2_000
STEPS = 1_000  # timers a test drive fires at most


def _offers(n: int) -> list[Quote]:
    fee_usd, fee_after_s = 0.1, 600.0
    return [
        Quote(f"h{i}", "RTX 3090", 1, 0.30 + i / 100, fee_usd, creation_fee_after_s=fee_after_s)
        for i in range(n)
    ]


def _fire_confirming(d: Drive, until: float) -> None:
    """Fire every timer due by `until` in order, the market confirming each release at once
    (so a host given back may be rented again, as on Clore). A core that loops fails it
    past `STEPS` timers, it cannot hang it."""
    fired: set[int] = set()
    confirmed: set[int] = set()
    for _ in range(STEPS):
        for release in d.releases():
            if release.server not in confirmed:
                confirmed.add(release.server)
                d.at(d.now, ServerReleased(release.server))
        due = [(t.at, i) for i, t in enumerate(d.timers()) if i not in fired and t.at <= until]
        if not due:
            return
        at, index = min(due)
        fired.add(index)
        d.at(max(at, d.now), TimerFired(d.timers()[index].token))
    raise AssertionError(f"{STEPS} timers fired and more are due by {until:.0f} s: a loop")


def test_a_racer_given_way_to_is_not_rented_again_in_the_run() -> None:
    # Four hosts, none ever online; three racing at most. Before, each host given way to came
    # back once its release was confirmed, and the ring went round them for ever.
    d = Drive(pipeline(job("a", gpu="3090")), hedge=HedgePolicy(), offers=_offers(4))
    _fire_confirming(d, 2_000.0)
    hosts = [r.quote.host for r in d.rents()]
    assert hosts == ["h0", "h1", "h2", "h3"]  # each once
    gave_way = [r for r in d.releases() if r.reason.startswith("hedge: not online")]
    # h0 went for h3; with no fresh host left the others race on to their bound.
    assert [r.server for r in gave_way] == [d.rents()[0].server]
    assert len(d.releases()) == 1


def test_the_simulation_stops_a_run_that_never_ends_loudly() -> None:
    jobs = pipeline(job("a", minutes=10))
    offers = _offers(12)
    book = ServerBook(jobs, 3, market=ModelMarket(offers), boot=BOOT, hedge=HedgePolicy())
    model = MarketModel(tuple(offers), boot_s=HEALTHY_BOOT_S, dead_fraction=0.6)
    with pytest.raises(SimulationStuck, match="made 20 events and the run has not ended"):
        simulate_servers(jobs, book, model, lambda j, a: 600.0, seed=5, max_events=20)


def _one_job_among_dead_hosts(seed: int, dead: float = 0.6, n: int = 12) -> list[str]:
    """The rented hosts of a one-job run on `n` hosts, `dead` of them never online."""
    jobs = pipeline(job("a", minutes=10))
    offers = _offers(n)
    book = ServerBook(jobs, 3, market=ModelMarket(offers), boot=BOOT, hedge=HedgePolicy())
    model = MarketModel(tuple(offers), boot_s=HEALTHY_BOOT_S, dead_fraction=dead)
    run = simulate_servers(
        jobs, book, model, lambda j, a: 600.0, seed=seed, max_events=ONE_JOB_EVENTS
    )
    assert not run.broken and 0 < run.events <= ONE_JOB_EVENTS
    alive = [h for h in run.rented_hosts if not model.dead(h, seed)]
    assert (run.status is RunStatus.PASSED) == bool(alive)
    return run.rented_hosts


def test_every_seed_of_the_dead_host_market_ends_renting_each_host_once() -> None:
    # The market of test_hedge's dead-host test, on 300 seeds: 15 of them (5, 40, 78, ...)
    # went round a ring of dead hosts for ever before.
    for seed in range(300):
        hosts = _one_job_among_dead_hosts(seed)
        assert len(hosts) == len(set(hosts)), (seed, hosts)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    hosts=st.integers(1, 16),
    dead=st.sampled_from([0.0, 0.3, 0.6, 0.9, 1.0]),
    ssh_dead=st.sampled_from([0.0, 0.3]),
    cap=st.integers(1, 5),
    jobs=st.integers(1, 4),
    fan_out=st.integers(1, 3),
    max_racing=st.integers(2, 4),
    racing_after_s=st.sampled_from([0.0, 10.0, 30.0, 1e9]),
)
def test_any_market_and_hedge_policy_ends_within_its_events(
    seed: int,
    hosts: int,
    dead: float,
    ssh_dead: float,
    cap: int,
    jobs: int,
    fan_out: int,
    max_racing: int,
    racing_after_s: float,
) -> None:
    pipe = pipeline(*(job(f"j{i}", minutes=10) for i in range(jobs)))
    offers = _offers(hosts)
    policy = HedgePolicy(fan_out=fan_out, max_racing=max_racing, racing_after_s=racing_after_s)
    book = ServerBook(pipe, cap, market=ModelMarket(offers), boot=BOOT, hedge=policy)
    model = MarketModel(
        tuple(offers), boot_s=HEALTHY_BOOT_S, dead_fraction=dead, ssh_dead_fraction=ssh_dead
    )
    run = simulate_servers(
        pipe, book, model, lambda j, a: 600.0, seed=seed, max_events=ONE_JOB_EVENTS * jobs
    )
    assert not run.broken
    # It ended: every job settled (run, or failed for want of a host that comes up).
    assert len(run.results) == jobs and run.status is not RunStatus.INTERRUPTED


def test_a_racer_is_not_given_way_to_in_the_instant_it_was_rented() -> None:
    # Late at once (racing_after_s 0): h0, late at 150 s, gets h1, which is late at once and
    # makes room: h0 goes for h2. Before, h2 then sent h1 back in the same instant for h3,
    # and so on round the market; now no racer goes back before a boot could be up.
    policy = HedgePolicy(fan_out=1, max_racing=2, racing_after_s=0.0)
    d = Drive(pipeline(job("a")), hedge=policy, offers=_offers(6))
    _fire_confirming(d, 179.0)
    first, h1, h2 = d.rents()
    assert [r.quote.host for r in d.rents()] == ["h0", "h1", "h2"]
    assert [r.server for r in d.releases()] == [first.server]
    _fire_confirming(d, 180.0)  # h1 and h2 have run 30 s, not online: they make room
    assert [r.quote.host for r in d.rents()] == ["h0", "h1", "h2", "h3", "h4"]
    assert {r.server for r in d.releases()} == {first.server, h1.server, h2.server}


def test_a_late_boot_is_looked_at_again_once_not_once_per_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A boot due a look both by its own timer and by a racer leaving its ring is looked at
    once: its look-again timer is set once for a time, never twice (each copy was one more
    event for the run, deciding nothing)."""
    hedge_timers: list[tuple[float, object]] = []
    handle = PlacingCore.handle

    def recording(core: PlacingCore, event: CoreEvent, now: float) -> list[CoreCommand]:
        out = handle(core, event, now)
        hedge_timers.extend(
            (c.at, c.token.of)
            for c in out
            if isinstance(c, SetTimer)
            and isinstance(c.token, BookTimer)
            and c.token.what is BookWake.HEDGE
        )
        return out

    monkeypatch.setattr(PlacingCore, "handle", recording)
    jobs = pipeline(job("a", minutes=10))
    offers = _offers(12)
    looked, twice = 0, []
    for seed in range(12):
        book = ServerBook(jobs, 3, market=ModelMarket(offers), boot=BOOT, hedge=HedgePolicy())
        model = MarketModel(tuple(offers), boot_s=HEALTHY_BOOT_S, dead_fraction=0.9)
        simulate_servers(jobs, book, model, lambda j, a: 600.0, seed=seed)
        looked += len(hedge_timers)
        twice += [(seed, timer) for timer, n in Counter(hedge_timers).items() if n > 1]
        hedge_timers.clear()
    assert looked  # the runs did look again
    assert twice == []
