"""Hedged boots: the policy (when) and the server book carrying it out (a second host for a
late boot, the first to answer wins, the other goes back at once, within cap and budget).

BOOT in these tests: 100 s expected, 300 s allowed; with the default policy a boot is hedged
at min(1.5 x 100, 300 / 2) = 150 s.
"""

from __future__ import annotations

import pytest

from runner.core.events import BookTimer, BookWake, SetTimer, TimerFired
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hosts import HostEvent, HostMemory
from runner.core.model import RunStatus
from runner.core.rentals import JobNote, Quote, RentFailed, RentServer, ServerReady
from runner.core.servers import AFTER_SCRIPT_S, ServerBook
from runner.core.simulate_market import HEALTHY_BOOT_S, MarketModel, ModelMarket, simulate_servers
from tests.core.test_servers import BOOT, OFFERS, Drive, job, pipeline, run_timers_until

# One hedge at a time: these tests follow a pair. A first late boot's two hedges, and a ring
# of three: tests/core/test_boot_phases.py.
PAIRS = HedgePolicy(fan_out=1, max_racing=2, racing_after_s=1e9)


def hedged(*jobs: object, **book: object) -> Drive:
    return Drive(pipeline(*jobs), hedge=PAIRS, **book)  # type: ignore[arg-type]


# -- the policy ------------------------------------------------------------------------------


def test_a_boot_is_hedged_past_its_expected_boot_and_no_later_than_half_the_bound() -> None:
    policy = HedgePolicy()
    assert policy.after_s(100.0, 0.1, 900.0) == 150.0
    assert policy.after_s(400.0, 0.1, 900.0) == 450.0  # a slow host's own boots: later
    assert policy.after_s(400.0, 0.1, 360.0) == 180.0  # but within half the bound
    assert policy.after_s(5.0, 0.1, 360.0) == 30.0  # never sooner than an image pull
    assert policy.after_s(100.0, 0.6, 360.0) == 0.0  # a host that likely fails: at once


def test_a_hedge_waits_for_room_under_the_cap() -> None:
    assert HedgePolicy().may_hedge(2, 3) is None
    assert HedgePolicy().may_hedge(3, 3) == "3 of 3 servers held (the cap)"
    assert NO_HEDGE.may_hedge(0, 3) == "hedging is off"


# -- the book --------------------------------------------------------------------------------


def test_a_late_boot_gets_a_second_host_and_the_first_to_answer_wins() -> None:
    d = hedged(job("a"))
    (first,) = d.rents()
    run_timers_until(d, 149.0)
    assert len(d.rents()) == 1
    run_timers_until(d, 150.0)
    _, hedge = d.rents()
    assert hedge.hedge_of == first.server and hedge.for_job == "a"
    assert hedge.quote.host == "a2" and not hedge.ahead  # the next fitting host
    d.at(180.0, ServerReady(hedge.server))
    (release,) = d.releases()
    assert release.server == first.server
    assert release.reason == "hedge: RTX 3090 #a2 answered SSH first"
    assert d.start_of("a").server == hedge.server


def test_when_both_come_up_the_first_runs_the_job_and_the_other_goes_back_at_once() -> None:
    d = hedged(job("a"))
    run_timers_until(d, 150.0)
    first, hedge = d.rents()
    d.at(160.0, ServerReady(first.server))
    assert d.start_of("a").server == first.server
    assert [(r.server, r.reason) for r in d.releases()] == [
        (hedge.server, "hedge: RTX 3090 #a1 answered SSH first")
    ]
    d.at(170.0, ServerReady(hedge.server))  # a late report of the one given back
    assert len(d.starts()) == 1 and len(d.releases()) == 1


def test_a_failed_boot_leaves_the_job_its_hedge_which_is_hedged_in_turn() -> None:
    d = hedged(job("a"))
    run_timers_until(d, 150.0)
    first, hedge = d.rents()
    d.at(250.0, RentFailed(first.server, "#a1 never came online", 0.025))
    assert len(d.rents()) == 2  # no third rent: the job's boot is its hedge now
    assert d.book.waiting() == ["a"]
    # The hedge runs late too (150 s of its own, looked at every 10 s while paired): hedged.
    run_timers_until(d, 299.0)
    assert len(d.rents()) == 2
    run_timers_until(d, 300.0)
    assert [r.quote.host for r in d.rents()] == ["a1", "a2", "a3"]
    assert d.rents()[2].hedge_of == hedge.server
    d.at(340.0, ServerReady(d.rents()[2].server))
    assert d.start_of("a").server == d.rents()[2].server
    assert [r.server for r in d.releases()] == [hedge.server]


def test_a_failed_boot_whose_hedge_is_late_already_gets_a_hedge_at_once() -> None:
    d = hedged(job("a"))
    run_timers_until(d, 150.0)
    first, hedge = d.rents()
    d.at(300.0, RentFailed(first.server, "#a1 never came online", 0.025))
    assert [r.hedge_of for r in d.rents()] == [None, first.server, hedge.server]


def test_no_hedge_when_the_budget_holds_one_boot_only_and_it_is_said() -> None:
    hold_h = (BOOT.allowance_s + 600.0 + AFTER_SCRIPT_S) / 3600
    d = hedged(job("a"), budget_usd=0.45 * hold_h * 1.5)
    run_timers_until(d, 200.0)
    assert len(d.rents()) == 1
    (note,) = [c for c in d.said if isinstance(c, JobNote)]
    assert note.job_id == "a"
    assert note.text.startswith("no hedge for the boot of RTX 3090 #a1 (150 s so far): the budget")


def test_no_hedge_at_the_cap() -> None:
    d = hedged(job("a"), job("b"), cap=2)
    run_timers_until(d, 150.0)
    assert len(d.rents()) == 2
    assert {c.text.rsplit(": ", 1)[1] for c in d.said if isinstance(c, JobNote)} == {
        "2 of 2 servers held (the cap)"
    }


def test_a_boot_rented_ahead_is_hedged_once_its_job_is_ready() -> None:
    d = hedged(job("a", minutes=1, gpu="4090"), job("b", "a", minutes=5))
    d.at(50.0, ServerReady(d.rent_for("a").server))
    run_timers_until(d, 60.0)
    b_rent = d.rent_for("b")  # rented ahead at 60 s: a should end a boot later
    assert b_rent.ahead and b_rent.quote.gpu_model == "RTX 3090"
    # Late at 135 s (1.5 x the 50 s boot measured), but b is not ready: looked at every 10 s.
    run_timers_until(d, 250.0)
    assert not any(r.hedge_of for r in d.rents())
    looks = [t.at for t in d.timers() if t.token == BookTimer(BookWake.HEDGE, b_rent.server)]
    assert looks[:3] == [135, 145, 155] and looks[-1] == 255
    d.finish(250.0, d.start_of("a"))
    d.at(255.0, TimerFired(BookTimer(BookWake.HEDGE, b_rent.server)))
    (hedge,) = [r for r in d.rents() if r.hedge_of is not None]
    assert hedge.hedge_of == b_rent.server and hedge.for_job == "b"


def test_a_host_that_likely_fails_is_hedged_from_the_start() -> None:
    # a1 failed five boots long ago: no longer skipped, but likely to fail again; a2 and a3
    # came up five times each, in 60 s.
    events = [HostEvent("a1", "never_up", t) for t in range(5)]
    events += [HostEvent(h, "up", t, 60.0) for h in ("a2", "a3") for t in range(5)]
    memory = HostMemory.of(events, now=1e9)
    market = ModelMarket(OFFERS, memory, BOOT.allowance_s)
    d = Drive(pipeline(job("a", gpu="3090")), hedge=HedgePolicy(), market=False)
    d.book = book = ServerBook(d.jobs, 3, market=market, boot=BOOT, hedge=HedgePolicy())
    book.want("a", 1, 600.0, 0.0)
    said = book.decide(0.0)
    rent = next(c for c in said if isinstance(c, RentServer))
    assert rent.quote.host == "a2"  # a1 ranks behind by its expected cost
    assert rent.quote.boot_s == 60.0
    timers = [c.at for c in said if isinstance(c, SetTimer) and _book(c.token, "hedge")]
    assert timers == [90.0]  # 1.5 x its own boots
    memory = HostMemory.of([HostEvent("x", "never_up", t) for t in range(9)], now=1e9)
    market = ModelMarket(OFFERS, memory, BOOT.allowance_s)  # a market whose boots all failed
    book = ServerBook(d.jobs, 3, market=market, boot=BOOT, hedge=HedgePolicy())
    book.want("a", 1, 600.0, 0.0)
    timers = [c.at for c in book.decide(0.0) if isinstance(c, SetTimer) and _book(c.token, "hedge")]
    assert timers == [0.0]
    book.timer(BookTimer(BookWake.HEDGE, 1), 0.0)
    assert [c.hedge_of for c in book.decide(0.0) if isinstance(c, RentServer)] == [1]


# -- the market, simulated -------------------------------------------------------------------


def test_hedging_adds_no_order_on_a_market_with_no_dead_host() -> None:
    jobs = pipeline(*(job(f"j{i}", minutes=10) for i in range(6)))
    for seed in range(10):
        rents = []
        for policy in (NO_HEDGE, HedgePolicy()):
            book = ServerBook(jobs, 3, market=ModelMarket(OFFERS), boot=BOOT, hedge=policy)
            model = MarketModel(OFFERS, boot_s=HEALTHY_BOOT_S)
            run = simulate_servers(jobs, book, model, lambda j, a: 600.0, seed=seed)
            assert not run.broken and run.status is RunStatus.PASSED
            rents.append(run.rents)
        assert rents[0] == rents[1]


def test_hedging_starts_the_first_job_sooner_among_dead_hosts_and_breaks_no_rule() -> None:
    jobs = pipeline(job("a", minutes=10))
    offers = [
        Quote(
            f"h{i}", "RTX 3090", 1, 0.30 + i / 100, creation_fee_usd=0.1, creation_fee_after_s=600.0
        )
        for i in range(12)
    ]
    firsts = {}
    for name, policy in (("off", NO_HEDGE), ("on", HedgePolicy())):
        starts = []
        for seed in range(20):
            book = ServerBook(jobs, 3, market=ModelMarket(offers), boot=BOOT, hedge=policy)
            model = MarketModel(tuple(offers), boot_s=HEALTHY_BOOT_S, dead_fraction=0.6)
            run = simulate_servers(jobs, book, model, lambda j, a: 600.0, seed=seed)
            assert not run.broken and run.status is RunStatus.PASSED
            assert run.creation_fees_usd <= 0.1 + 1e-9  # the server that ran it; no dead one
            starts.append(run.first_start_s or 0.0)
        firsts[name] = sum(starts) / len(starts)
    assert firsts["on"] < 0.75 * firsts["off"]


def test_the_simulated_market_has_dead_hosts_and_sshds_that_never_answer() -> None:
    jobs = pipeline(job("a", minutes=10))
    book = ServerBook(jobs, 3, market=ModelMarket(OFFERS), boot=BOOT)
    model = MarketModel(
        OFFERS, boot_s=(50.0, 50.0), dead_hosts=frozenset({"a1"}), ssh_dead_hosts=frozenset({"a2"})
    )
    run = simulate_servers(jobs, book, model, lambda j, a: 600.0, start_unix=1000.0)
    assert run.status is RunStatus.PASSED and not run.broken
    kinds = [(e.host, e.kind, e.at) for e in run.host_events]
    # a1 given up at the bound (300 s); a2 online after 50 s, its sshd probed 170 s more.
    assert kinds == [("a1", "never_up", 1300.0), ("a2", "ssh_failed", 1520.0), ("a3", "up", 1570.0)]
    assert run.host_events[-1].boot_s == 50.0
    assert run.failed_boots == 2 and run.first_start_s == 570.0
    assert run.billed_usd == pytest.approx(
        0.30 * 300 / 3600 + 0.40 * 220 / 3600 + 0.50 * 650 / 3600
    )


def _book(token: object, what: str) -> bool:
    """The book's timer of that kind."""
    return isinstance(token, BookTimer) and token.what == what


def _of(token: object) -> object:
    """What a book timer is about (a job, a server, a time)."""
    return token.of if isinstance(token, BookTimer) else None
