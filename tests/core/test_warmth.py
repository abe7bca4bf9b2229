"""Warm servers in serve's core, rule by rule, on a fake clock: kept after a job, rented for a
pool's window, within the idle budget, and never across trust domains."""

from __future__ import annotations

import random
from dataclasses import replace

from runner.core.events import BookTimer, SetTimer, TimerFired
from runner.core.model import GpuAsk, Job
from runner.core.placing import PlacingCore
from runner.core.rentals import (
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerLost,
    ServerReady,
    StartOn,
)
from runner.core.scheduler import Entry
from runner.core.servers import ServerBook
from runner.core.simulate_market import ModelMarket
from runner.core.simulate_queue import Arrival, simulate_queue
from runner.core.warm_policy import DAY_S, WarmPolicy, WarmPool, Window, untrusted, weekday
from runner.spec.trust import fork_domain, repo_domain
from tests.core.test_placing_over_time import T0, Queue
from tests.core.test_servers import BOOT, job

KEEP_15 = WarmPolicy(keep_warm_s=900.0)
WEEKDAYS_8_TO_20 = Window(frozenset(range(5)), 8 * 3600, 20 * 3600)


def warm_queue(policy: WarmPolicy, cap: int = 2) -> Queue:
    q = Queue(cap=cap)
    q.book.warmth = policy
    return q


def one_job_done(q: Queue, job_id: str = "a", **kw: object) -> RentServer:
    """`job_id` submitted at T0, its server up at +100 s, the job over at +200 s."""
    q.submit(T0, job(job_id, **kw))  # type: ignore[arg-type]
    rent = q.rents()[-1]
    q.at(T0 + 100, ServerReady(rent.server))
    q.passes(T0 + 200, job_id)
    return rent


def releases(q: Queue) -> list[ReleaseServer]:
    return [c for c in q.said if isinstance(c, ReleaseServer)]


def test_t0_is_a_friday_morning() -> None:
    assert weekday(T0) == 4 and WEEKDAYS_8_TO_20.covers(T0)


def test_without_keep_warm_an_idle_server_no_job_wants_goes_back_at_once() -> None:
    q = warm_queue(WarmPolicy())
    rent = one_job_done(q)
    assert [r.server for r in releases(q)] == [rent.server]


def look_timer(q: Queue, server: int) -> SetTimer:
    return next(t for t in reversed(q.book_timers("look")) if _of(t.token) == server)


def fired(timer: SetTimer) -> TimerFired:
    return TimerFired(timer.token)


def test_keep_warm_gives_the_next_job_the_same_server_without_a_rent() -> None:
    q = warm_queue(KEEP_15)
    rent = one_job_done(q)
    timer = look_timer(q, rent.server)
    assert abs(timer.at - (T0 + 200 + 900)) < 1.0  # 15 minutes after the job, not a boot
    out = q.submit(T0 + 200 + 600, job("b"))
    assert StartOn("b", 1, rent.server, 600.0) in out
    assert len(q.rents()) == 1 and not releases(q)


def test_a_kept_server_goes_back_at_keep_warm_after_its_last_job() -> None:
    q = warm_queue(KEEP_15)
    rent = one_job_done(q)
    timer = look_timer(q, rent.server)
    assert abs(timer.at - (T0 + 200 + 900)) < 1.0
    q.at(timer.at, fired(timer))
    assert [r.server for r in releases(q)] == [rent.server]


def test_a_server_never_goes_to_a_job_of_another_trust_domain() -> None:
    q = warm_queue(KEEP_15)
    rent = one_job_done(q, trust="team-a")
    out = q.submit(T0 + 300, job("b", trust="team-b"))
    assert not [c for c in out if isinstance(c, StartOn)]
    assert len(q.rents()) == 2 and q.rents()[-1].server != rent.server
    out = q.submit(T0 + 310, job("c", trust="team-a"))
    assert StartOn("c", 1, rent.server, 600.0) in out


def test_a_server_of_a_fork_is_never_kept_warm() -> None:
    q = warm_queue(KEEP_15)
    rent = one_job_done(q, trust=fork_domain("someone/repo", 7))
    assert [r.server for r in releases(q)] == [rent.server]  # at once, as with no warmth
    assert untrusted(fork_domain("someone/repo", 7)) and not untrusted(repo_domain("a/b"))


def test_a_job_of_another_image_rents_its_own_server() -> None:
    q = warm_queue(KEEP_15)
    one_job_done(q)
    out = q.submit(T0 + 300, job("b", image="pytorch/pytorch:2.3"))
    assert not [c for c in out if isinstance(c, StartOn)]
    assert len(q.rents()) == 2


def test_the_idle_budget_shortens_a_keep_to_what_it_can_pay() -> None:
    # 3090 at $0.30/h: $0.025 pays 5 minutes idle, not the 15 asked.
    q = warm_queue(replace(KEEP_15, idle_budget_usd=0.025))
    rent = one_job_done(q)
    timer = look_timer(q, rent.server)
    assert abs(timer.at - (T0 + 200 + 300)) < 2.0
    q.at(timer.at, fired(timer))
    assert [r.server for r in releases(q)] == [rent.server]
    assert q.book.idle_today_usd(timer.at) <= 0.025 + 1e-6


def test_a_pool_rents_for_warmth_in_its_window_and_the_first_job_takes_it() -> None:
    q = warm_queue(WarmPolicy(pools=(WarmPool("4090", 1, WEEKDAYS_8_TO_20),)), cap=3)
    q.submit(T0, job("first", gpu="3090"))  # any event: the core decides
    warm = [r for r in q.rents() if r.warm is not None]
    assert len(warm) == 1 and warm[0].quote.gpu_model == "RTX 4090"
    q.at(T0 + 100, ServerReady(warm[0].server))
    out = q.submit(T0 + 3000, job("b", gpu="4090"))
    assert StartOn("b", 1, warm[0].server, 600.0) in out
    # The pool is short again: a second one is rented for the next job.
    assert len([r for r in q.rents() if r.warm is not None]) == 2


def test_a_pool_rents_nothing_outside_its_window() -> None:
    q = warm_queue(WarmPolicy(pools=(WarmPool("4090", 1, WEEKDAYS_8_TO_20),)))
    evening = T0 + 13 * 3600  # 21:00 on the Friday
    q.submit(evening, job("a", gpu="3090"))
    assert not [r for r in q.rents() if r.warm is not None]
    wake = [t for t in q.book_timers("warm")]
    assert wake and min(t.at for t in wake) == T0 + 3 * DAY_S  # Monday 08:00


def test_a_pool_past_the_idle_budget_rents_nothing() -> None:
    q = warm_queue(WarmPolicy(pools=(WarmPool("4090", 1, None),), idle_budget_usd=0.05))
    q.submit(T0, job("a", gpu="3090"))
    assert not [r for r in q.rents() if r.warm is not None]  # an hour at $0.60 does not fit


def test_two_domains_interleaved_never_share_a_server() -> None:
    """A seeded day of two domains (and a fork's jobs) through serve's core with warmth on:
    servers are reused, never across domains."""
    offers = tuple(Quote(f"h{i}", "RTX 4090", 1, 0.4 + i / 100) for i in range(8))
    for seed in range(5):
        rng = random.Random(seed)
        arrivals, at = [], T0
        for i in range(60):
            at += rng.expovariate(1 / 240)
            domain = rng.choice(["team-a", "team-b", fork_domain("x/y", i % 2)])
            j = Job(id=f"j{i}", name=f"j{i}", run="true", gpu=GpuAsk(type="4090"), trust=domain)
            arrivals.append(Arrival(at, j, rng.uniform(30, 400)))
        policy = WarmPolicy(keep_warm_s=1800, pools=(WarmPool("4090", 1, None),))
        result = simulate_queue(arrivals, offers, policy, cap=4, dirty_chance=0.2, seed=seed)
        assert len(result.waits_s) == 60
        assert result.warm_starts > 0  # warmth did something
        assert result.cross_domain_reuses == 0
        assert result.dirty_reuses == 0  # a server that failed its handover ran nothing more
        assert result.double_starts == 0  # one job at a time on a server, warm or not


def test_a_lost_warm_server_is_replaced_within_the_window() -> None:
    q = warm_queue(WarmPolicy(pools=(WarmPool("4090", 1, WEEKDAYS_8_TO_20),)), cap=3)
    q.submit(T0, job("first", gpu="3090"))
    (warm,) = [r for r in q.rents() if r.warm is not None]
    q.at(T0 + 100, ServerReady(warm.server))
    q.at(T0 + 900, ServerLost(warm.server, "outbid"))
    again = [r for r in q.rents() if r.warm is not None]
    assert len(again) == 2 and again[1].quote.host != warm.quote.host  # that host is excluded


def test_a_warm_server_at_its_maximum_rental_length_is_replaced() -> None:
    offers = (
        Quote("short", "RTX 4090", 1, 0.50, max_rental_s=2 * 3600),
        Quote("long", "RTX 4090", 1, 0.60),
    )
    book = ServerBook((), 3, market=ModelMarket(offers), boot=BOOT, now=T0)
    book.warmth = WarmPolicy(pools=(WarmPool("4090", 1, None),))
    core = PlacingCore((), book, ongoing=True)
    said = core.add([Entry(job("a", gpu="3090"), 1)], {}, T0)  # the 3090 finds no offer
    (warm,) = [c for c in said if isinstance(c, RentServer) and c.warm is not None]
    assert warm.quote.host == "short"  # its two hours hold the first hour kept warm
    said = core.handle(ServerReady(warm.server), T0 + 100)
    timers = [c for c in said if isinstance(c, SetTimer) and _book(c.token, "look")]
    # Kept an hour at a time, never past the order's end (two hours after its create).
    now = T0 + 100
    while not any(isinstance(c, ReleaseServer) for c in said):
        (timer,) = timers
        assert timer.at <= T0 + 2 * 3600 + 1
        now = timer.at
        said = core.handle(TimerFired(timer.token), now)
        timers = [c for c in said if isinstance(c, SetTimer) and _book(c.token, "look")]
    replacement = [c for c in said if isinstance(c, RentServer) and c.warm is not None]
    assert now <= T0 + 2 * 3600 + 1 and replacement


def test_a_failed_rent_for_warmth_is_tried_again_on_another_host() -> None:
    q = warm_queue(WarmPolicy(pools=(WarmPool("4090", 1, None),)), cap=3)
    q.submit(T0, job("a", gpu="3090"))
    (warm,) = [r for r in q.rents() if r.warm is not None]
    q.at(T0 + 10, RentFailed(warm.server, "the host refused the order"))
    again = [r for r in q.rents() if r.warm is not None]
    assert len(again) == 2 and again[1].quote.host != warm.quote.host
    assert q.book._warmth._for_pool.keys() == {again[1].server}  # the failed one forgotten


def _book(token: object, what: str) -> bool:
    """The book's timer of that kind."""
    return isinstance(token, BookTimer) and token.what == what


def _of(token: object) -> object:
    """What a book timer is about (a job, a server, a time)."""
    return token.of if isinstance(token, BookTimer) else None
