"""A host's maximum rental length: an offer that cannot hold a job's worst case is not rented
for it, and a server held is not given a job that would outlive it."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from runner.core.fleet import AFTER_SCRIPT_S
from runner.core.hedge import HedgePolicy
from runner.core.known_jobs import Unplaceable
from runner.core.model import FailureKind, GpuAsk, Job, RunStatus
from runner.core.rental_length import best_that_holds, holds, outlives
from runner.core.rentals import BootTimes, Provisioning, Quote, ServerReady
from runner.core.servers import ServerBook
from runner.core.simulate_market import MarketModel, ModelMarket, simulate_servers
from tests.core.book_parts import A3090, BOOT, OFFERS, job, parts, rents, starts
from tests.core.test_servers import Drive, pipeline

WORST_S = 300.0 + 600.0 + AFTER_SCRIPT_S  # the longest boot, the timeout, fetching files
SHORT = replace(A3090, max_rental_s=WORST_S - 1.0)  # the cheapest, one second too short
LONG = replace(OFFERS[1], max_rental_s=WORST_S)  # dearer, and just long enough


def test_a_quote_holds_a_hold_up_to_its_maximum_and_one_with_none_known_holds_any() -> None:
    assert holds(LONG, WORST_S) and not holds(SHORT, WORST_S)
    assert holds(A3090, 10 * 365 * 86_400.0)


def test_the_best_offer_too_short_for_the_job_is_passed_over_for_one_that_holds_it() -> None:
    market = ModelMarket((SHORT, LONG, *OFFERS[2:]))
    quote, passed = best_that_holds(market, GpuAsk(type="3090"), set(), WORST_S)
    assert quote == LONG and passed == (SHORT,)
    quote, passed = best_that_holds(market, GpuAsk(type="3090"), {"a2"}, WORST_S)
    assert quote is None and passed == (SHORT,)


def test_a_waiting_job_rents_the_offer_whose_length_holds_its_worst_case() -> None:
    p = parts([job("a")], offers=(SHORT, LONG, *OFFERS[2:]))
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    assert [r.quote.host for r in rents(p.said())] == ["a2"]


def test_a_job_no_offer_is_long_enough_for_fails_saying_which_were_passed_over() -> None:
    too_short = replace(LONG, max_rental_s=600.0)
    p = parts([job("a")], offers=(replace(SHORT, max_rental_s=900.0), too_short, *OFFERS[2:]))
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    assert rents(p.said()) == []
    [failed] = p.jobs.unplaceable
    assert isinstance(failed, Unplaceable) and failed.failure is FailureKind.UNAVAILABLE
    assert "2 offer(s) passed over (#a1, #a2)" in failed.message
    said = "maximum rental length 15 min or less cannot hold the job's worst case 17 min"
    assert said in failed.message


def test_a_server_held_is_not_given_a_job_that_would_outlive_it_the_job_rents_instead() -> None:
    p = parts([job("a"), job("b")])
    # Rented at -100 s, up at 0 s: 700 s of its length are left.
    server = p.up(replace(A3090, max_rental_s=800.0))
    assert outlives(server, 701.0) and not outlives(server, 700.0)
    p.want("a")
    assert p.placer.place_on(server, 0.0) is False  # 600 s and fetching files do not fit
    assert starts(p.said()) == []
    p.want("b", timeout_s=60.0)  # a short job does
    assert p.placer.place_on(server, 0.0) is True
    assert [s.job_id for s in starts(p.said())] == ["b"]


def test_a_retry_kept_on_a_server_too_short_for_it_lets_go_of_it_and_rents_again() -> None:
    p = parts([job("a")], offers=(replace(A3090, max_rental_s=800.0), LONG))
    server = p.up(replace(A3090, max_rental_s=800.0))
    p.fleet.keep_for("a", server)
    p.want("a")
    assert p.placer.place_on(server, 0.0) is False
    assert server.kept_for is None and "a" not in p.fleet.claims
    p.renter.rent_for_waiting(0.0)
    assert [r.quote.host for r in rents(p.said())] == ["a2"]


def test_an_idle_server_whose_length_ends_within_a_boot_goes_back() -> None:
    p = parts([job("a"), job("b", "a")])
    server = p.up(replace(A3090, max_rental_s=150.0))  # rented at -100 s: 50 s left
    p.giver.give_back(0.0, stopping=False)
    assert server.id in p.fleet.releasing


def test_a_hedge_is_rented_only_on_a_host_that_holds_the_job() -> None:
    offers = (A3090, replace(OFFERS[1], max_rental_s=60.0), replace(OFFERS[1], host="a3"))
    p = parts([job("a")], offers=offers, hedge=HedgePolicy())
    p.want("a")
    p.renter.rent_for_waiting(0.0)
    p.said()
    p.fleet.to_hedge.append(1)
    p.hedger.hedge_due(1000.0)
    assert [r.quote.host for r in rents(p.said())] == ["a3"]


def test_each_job_is_reserved_and_held_to_lengths_by_its_own_images_boot_bound() -> None:
    """Two images: the default one boots within 300 s, a large one may pull 20 minutes more.
    Each job's worst case counts its own image's bound, for the money reserved and for the
    host lengths that can hold it alike; the slowest image of the run is no other job's."""
    big_worst_s = 1500.0 + 600.0 + AFTER_SCRIPT_S
    boot = replace(BOOT, allowance_s=1500.0, by_image_s={"": 300.0, "big": 1500.0})
    fits_small = replace(A3090, max_rental_s=WORST_S)  # the cheapest: holds the small one only
    fits_big = replace(OFFERS[1], max_rental_s=big_worst_s)
    p = parts([job("a"), job("b", image="big")], offers=(fits_small, fits_big), boot=boot)
    p.want("a")
    p.want("b")
    p.renter.rent_for_waiting(0.0)
    got = [(r.for_job, r.quote.host, r.worst_case_usd) for r in rents(p.said())]
    assert got == [
        ("a", "a1", pytest.approx(fits_small.cost_usd(WORST_S))),
        ("b", "a2", pytest.approx(fits_big.cost_usd(big_worst_s))),
    ]


def test_a_job_after_one_of_another_image_pulls_its_own_and_is_reserved_for_it() -> None:
    """A server started with one image is never given a job of another (its image would
    have to be pulled again): that job rents its own server, reserved for its own image's
    boot, while the first one's server, free, is no use to it."""
    boot = replace(BOOT, allowance_s=1500.0, by_image_s={"": 300.0, "big": 1500.0})
    d = Drive(pipeline(job("a"), job("b", "a", image="big")), boot=boot)
    d.at(100.0, ServerReady(d.rent_for("a").server))
    d.finish(400.0, d.start_of("a"))
    small, big = d.rent_for("a"), d.rent_for("b")
    assert (small.quote.host, big.quote.host) == ("a1", "a2")  # a1 is still held
    assert small.worst_case_usd == pytest.approx(A3090.cost_usd(WORST_S))
    big_worst_s = 1500.0 + 600.0 + AFTER_SCRIPT_S
    assert big.worst_case_usd == pytest.approx(OFFERS[1].cost_usd(big_worst_s))


def _random_jobs(rng: random.Random) -> list[Job]:
    out = []
    for i in range(rng.randint(1, 8)):
        needs = tuple(f"j{x}" for x in range(i) if rng.random() < 0.3)
        seconds = rng.choice((30.0, 300.0, 1800.0, 7200.0))
        gpu = GpuAsk(type="3090")
        out.append(
            Job(
                f"j{i}",
                f"j{i}",
                "true",
                i,
                needs,
                gpu=gpu,
                estimate_s=seconds,
                timeout_s=seconds * rng.choice((1.0, 2.0, 3.0)),
                retries=rng.randint(0, 2),
            )
        )
    return out


def _by_job(durations: dict[str, float]) -> Callable[[str, int], float]:
    return lambda job_id, _attempt: durations[job_id]


@pytest.mark.slow
def test_simulated_runs_never_hold_a_rental_past_its_hosts_maximum_length() -> None:
    """Hosts of lengths from minutes to days, jobs of seconds to hours with retries, servers
    lost and rents failing: no rental outlives its host's maximum (the figure: 0)."""
    rng = random.Random(33)
    outlived = rented = 0
    for seed in range(300):
        jobs = _random_jobs(rng)
        lengths = (None, 600.0, 3600.0, 4 * 3600.0, 30 * 3600.0)
        offers = tuple(
            Quote(
                f"h{i}",
                "RTX 3090",
                1,
                round(rng.uniform(0.1, 1.0), 3),
                max_rental_s=rng.choice(lengths),
            )
            for i in range(rng.randint(2, 8))
        )
        model = MarketModel(
            offers,
            boot_s=(20.0, 200.0),
            lost_per_hour=rng.choice((0.0, 2.0)),
            rent_failure_rate=rng.choice((0.0, 0.2)),
        )
        book = ServerBook(
            jobs,
            rng.randint(1, 4),
            market=ModelMarket(offers),
            boot=BootTimes(default_s=100.0, allowance_s=300.0),
            provisioning=rng.choice(tuple(Provisioning)),
        )
        durations = {j.id: (j.estimate_s or 0.0) * rng.uniform(0.2, 1.2) for j in jobs}
        result = simulate_servers(jobs, book, model, _by_job(durations), seed=seed)
        assert result.broken == [], (seed, result.broken[:3])
        assert len(result.results) == len(jobs), seed  # every job settled: nothing hangs
        outlived += result.outlived
        rented += result.rents
        assert result.status in (RunStatus.PASSED, RunStatus.FAILED, RunStatus.ERROR)
    assert outlived == 0 and rented > 300
