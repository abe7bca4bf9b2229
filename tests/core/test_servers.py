"""The core's decisions about servers, one rule at a time: events in, commands out, no clock.

Each test drives `PlacingCore` (the scheduler with its server book) by hand, as the driver
would, and asserts on the commands it answers with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptRecorded,
    BookTimer,
    BookWake,
    SetTimer,
    Settled,
    TimerFired,
    Wake,
)
from runner.core.model import (
    Attempt,
    FailureKind,
    GpuAsk,
    Job,
    JobStatus,
    Priority,
    RunStatus,
)
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Provisioning,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerLost,
    ServerReady,
    ServerReleased,
    StartOn,
)
from runner.core.servers import AFTER_SCRIPT_S, MAX_OFFERS_PER_ATTEMPT, ServerBook
from runner.core.simulate_market import ModelMarket

BOOT = BootTimes(default_s=100.0, allowance_s=300.0)
OFFERS = (
    Quote("a1", "RTX 3090", 1, 0.30),
    Quote("a2", "RTX 3090", 1, 0.40),
    Quote("a3", "RTX 3090", 1, 0.50),
    Quote("b1", "RTX 4090", 1, 0.60),
    Quote("b2", "RTX 4090", 1, 0.70),
    Quote("c1", "A100", 1, 1.20),
)


def job(job_id: str, *needs: str, gpu: str = "3090", minutes: float | None = 5.0, **kw: Any) -> Job:
    estimate = minutes * 60 if minutes is not None else None
    return Job(
        id=job_id,
        name=job_id,
        run="true",
        needs=needs,
        gpu=GpuAsk(type=gpu),
        estimate_s=estimate,
        timeout_s=kw.pop("timeout_s", 600.0),
        **kw,
    )


def pipeline(*jobs: Job) -> list[Job]:
    return [replace(j, index=i) for i, j in enumerate(jobs)]


class Drive:
    """The core and what it said, with the time kept by the test."""

    def __init__(
        self,
        jobs: Sequence[Job],
        cap: int = 3,
        *,
        offers: Sequence[Quote] = OFFERS,
        fixed: Sequence[Quote] = (),
        market: bool = True,
        **book: Any,
    ) -> None:
        self.jobs = list(jobs)
        self.book = ServerBook(
            self.jobs,
            cap,
            market=ModelMarket(offers) if market else None,
            fixed_hosts=fixed,
            boot=book.pop("boot", BOOT),
            **book,
        )
        self.core = PlacingCore(self.jobs, self.book)
        self.now = 0.0
        self.said: list[CoreCommand] = list(self.core.start(0.0))

    def at(self, now: float, event: CoreEvent) -> list[CoreCommand]:
        self.now = now
        out = self.core.handle(event, now)
        self.said.extend(out)
        return out

    def rents(self) -> list[RentServer]:
        return [c for c in self.said if isinstance(c, RentServer)]

    def starts(self) -> list[StartOn]:
        return [c for c in self.said if isinstance(c, StartOn)]

    def releases(self) -> list[ReleaseServer]:
        return [c for c in self.said if isinstance(c, ReleaseServer)]

    def finish(self, now: float, start: StartOn, failure: FailureKind | None = None) -> list[Any]:
        code = 0 if failure is None else 1
        attempt = Attempt(start.attempt, now, now, code, failure)
        return self.at(now, AttemptEnded(start.job_id, attempt))

    def start_of(self, job_id: str) -> StartOn:
        return next(s for s in reversed(self.starts()) if s.job_id == job_id)

    def rent_for(self, job_id: str) -> RentServer:
        return next(r for r in reversed(self.rents()) if r.for_job == job_id)

    def timers(self) -> list[SetTimer]:
        return [c for c in self.said if isinstance(c, SetTimer)]


def run_timers_until(d: Drive, until: float) -> None:
    """Fire, in order, every timer due by `until` that the core asked for so far."""
    fired: set[int] = set()
    while True:
        due = [(t.at, i) for i, t in enumerate(d.timers()) if i not in fired and t.at <= until]
        if not due:
            return
        at, index = min(due)
        fired.add(index)
        d.at(max(at, d.now), TimerFired(d.timers()[index].token))


# -- renting and the budget ----------------------------------------------------------------------


def test_a_ready_job_rents_the_cheapest_fitting_offer_with_its_worst_case_reserved() -> None:
    d = Drive(pipeline(job("a", gpu="4090", timeout_s=1200.0)), budget_usd=10.0)
    (rent,) = d.rents()
    assert rent.quote.host == "b1" and rent.for_job == "a" and not rent.ahead
    hold_s = BOOT.allowance_s + 1200.0 + AFTER_SCRIPT_S
    assert rent.worst_case_usd == pytest.approx(0.60 * hold_s / 3600)


def test_the_creation_fee_is_in_the_worst_case_when_the_order_could_live_ten_minutes() -> None:
    offers = (Quote("f1", "RTX 3090", 1, 0.30, creation_fee_usd=0.25, creation_fee_after_s=600.0),)
    d = Drive(pipeline(job("a")), offers=offers)
    hold_s = BOOT.allowance_s + 600.0 + AFTER_SCRIPT_S
    assert d.rents()[0].worst_case_usd == pytest.approx(0.30 * hold_s / 3600 + 0.25)


def test_a_rent_that_does_not_fit_the_budget_waits_for_money_to_be_freed() -> None:
    hold_h = (BOOT.allowance_s + 600.0 + AFTER_SCRIPT_S) / 3600
    d = Drive(pipeline(job("a"), job("b")), budget_usd=0.30 * hold_h * 1.5)
    assert [r.for_job for r in d.rents()] == ["a"]  # b's worst case would pass the budget
    d.at(100.0, ServerReady(d.rents()[0].server))
    assert d.start_of("a").server == d.rents()[0].server
    # a ends after 300 s: b runs on a's server (its reservation now fits), no second rent.
    d.finish(400.0, d.start_of("a"))
    assert [r.for_job for r in d.rents()] == ["a"]
    assert d.start_of("b").server == d.rents()[0].server


def test_a_job_whose_rental_could_never_fit_the_budget_fails_as_unavailable() -> None:
    d = Drive(pipeline(job("a", gpu="A100")), budget_usd=0.01)
    assert d.rents() == []
    assert d.core.done and d.core.status() is RunStatus.ERROR
    (result,) = d.core.results()
    assert result.status is JobStatus.ERROR
    assert result.attempts[-1].failure is FailureKind.UNAVAILABLE
    assert "budget $0.01 would be exceeded" in result.reason


def test_a_job_no_offer_fits_fails_with_the_reason() -> None:
    d = Drive(pipeline(job("a", gpu="H200")))
    (result,) = d.core.results()
    assert result.attempts[-1].failure is FailureKind.UNAVAILABLE
    assert "no offer fits" in result.reason


def test_the_cap_limits_servers_held_not_jobs_known() -> None:
    d = Drive(pipeline(job("a"), job("b"), job("c"), job("d")), cap=2)
    assert len(d.rents()) == 2
    assert sorted(d.book.waiting()) == ["a", "b", "c", "d"]


def test_renting_ahead_never_takes_a_slot_beyond_the_cap() -> None:
    jobs = pipeline(job("a", gpu="4090"), job("b", "a", gpu="A100"), job("c", gpu="3090"))
    d = Drive(jobs, cap=2)
    assert [r.for_job for r in d.rents()] == ["a", "c"]
    run_timers_until(d, 10_000.0)
    assert len(d.rents()) == 2 and len(d.book.servers()) == 2


# -- placement and reuse -------------------------------------------------------------------------


def test_a_finished_server_runs_the_job_that_needs_the_one_that_ran_there() -> None:
    # b needs a and is short; c is long (a higher rank) and ready too: a's warm server goes
    # to b, whose files it holds; c has its own.
    jobs = pipeline(job("a", minutes=1), job("b", "a", minutes=1), job("c", minutes=30))
    d = Drive(jobs, cap=1)
    server = d.rents()[0].server
    d.at(100.0, ServerReady(server))
    assert d.start_of("c").server == server  # the longest path first
    d.finish(1900.0, d.start_of("c"))
    d.at(1900.0, AttemptPlaced("a", 1))
    d.finish(1960.0, d.start_of("a"))
    assert d.start_of("b").server == server


def test_warm_reuse_wins_a_tie_the_file_order_would_give_to_another_job() -> None:
    # x and b are alike (a minute each, same priority); x comes first in the file, but b needs
    # a, which just ran on the only server: b goes there first, its files warm.
    jobs = pipeline(job("a", minutes=1), job("x", minutes=1), job("b", "a", minutes=1))
    d = Drive(jobs, cap=1, provisioning=Provisioning.ON_DEMAND)
    server = d.rents()[0].server
    d.at(100.0, ServerReady(server))
    d.finish(160.0, d.start_of("a"))
    assert [s.job_id for s in d.starts()] == ["a", "b"]


def test_a_chain_on_one_gpu_type_uses_one_server() -> None:
    d = Drive(pipeline(job("a"), job("b", "a"), job("c", "b")))
    run_timers_until(d, 100.0)
    d.at(100.0, ServerReady(d.rents()[0].server))
    for name, end in (("a", 400.0), ("b", 700.0), ("c", 1000.0)):
        run_timers_until(d, end)
        d.finish(end, d.start_of(name))
    assert len(d.rents()) == 1
    assert {s.server for s in d.starts()} == {d.rents()[0].server}
    assert d.core.done and [r.server for r in d.releases()] == [d.rents()[0].server]


def test_fixed_hosts_are_never_rented_and_cap_the_jobs_running() -> None:
    hosts = (Quote("h1"), Quote("h2"))
    d = Drive(pipeline(job("a"), job("b"), job("c")), cap=2, fixed=hosts, market=False)
    assert d.rents() == []
    assert [s.job_id for s in d.starts()] == ["a", "b"]
    d.finish(10.0, d.start_of("a"))
    assert d.start_of("c").server == d.start_of("a").server
    d.finish(20.0, d.start_of("b"))
    d.finish(30.0, d.start_of("c"))
    assert d.core.done
    assert {r.rented for r in d.releases()} == {False}  # let go at the end, never cancelled


def test_more_fixed_hosts_than_the_cap_run_no_more_than_cap_jobs() -> None:
    hosts = (Quote("h1"), Quote("h2"), Quote("h3"))
    d = Drive(pipeline(job("a"), job("b"), job("c")), cap=2, fixed=hosts, market=False)
    assert [s.job_id for s in d.starts()] == ["a", "b"]
    d.finish(10.0, d.start_of("b"))
    assert [s.job_id for s in d.starts()] == ["a", "b", "c"]


def test_with_every_host_free_a_job_goes_where_its_need_just_ran() -> None:
    # b (urgent) takes h1, a takes h2; b ends, then a: both hosts are free when c is ready,
    # and c goes to h2, where the files of a are.
    hosts = (Quote("h1"), Quote("h2"))
    jobs = pipeline(job("b", priority=Priority.URGENT), job("a"), job("c", "a"))
    d = Drive(jobs, cap=2, fixed=hosts, market=False)
    assert (d.start_of("b").server, d.start_of("a").server) == (1, 2)
    d.finish(10.0, d.start_of("b"))
    d.finish(20.0, d.start_of("a"))
    assert d.start_of("c").server == 2


# -- giving back ---------------------------------------------------------------------------------


def test_a_server_no_job_can_use_within_a_boot_is_given_back_at_once() -> None:
    jobs = pipeline(job("a", gpu="4090"), job("b", "a", gpu="A100", minutes=1))
    d = Drive(jobs, provisioning=Provisioning.ON_DEMAND)
    server = d.rent_for("a").server
    d.at(100.0, ServerReady(server))
    out = d.finish(400.0, d.start_of("a"))
    assert ReleaseServer(server, "no job waiting can use it within a boot") in out
    assert d.rent_for("b").quote.gpu_model == "A100"


def test_a_server_a_job_will_want_within_a_boot_is_kept_then_given_back_if_unused() -> None:
    # c (3090) will be ready when b ends, 50 s after a's 3090 is free: it is kept for c.
    jobs = pipeline(
        job("a", minutes=5),
        job("b", gpu="4090", minutes=5 + 50 / 60),
        job("c", "b"),
    )
    d = Drive(jobs, provisioning=Provisioning.ON_DEMAND)
    a_server, b_server = d.rent_for("a").server, d.rent_for("b").server
    d.at(100.0, ServerReady(a_server))
    d.at(100.0, ServerReady(b_server))
    out = d.finish(400.0, d.start_of("a"))
    assert not [c for c in out if isinstance(c, ReleaseServer)]
    (look,) = [c for c in out if isinstance(c, SetTimer)]
    assert look.at == pytest.approx(400.0 + BOOT.expected_s, abs=0.01)
    d.finish(450.0, d.start_of("b"))
    assert d.start_of("c").server == a_server  # not b's 4090: c asks for a 3090
    # Had c not come, the kept server would have gone when its boot's worth of time ran out.
    d2 = Drive(pipeline(job("a", minutes=5), job("b", gpu="4090", minutes=6), job("c", "b")))
    d2.at(100.0, ServerReady(d2.rent_for("a").server))
    d2.at(100.0, ServerReady(d2.rent_for("b").server))
    d2.finish(400.0, d2.start_of("a"))
    assert d2.at(500.0, TimerFired(BookTimer(BookWake.LOOK, d2.rent_for("a").server))) == [
        ReleaseServer(d2.rent_for("a").server, "no job waiting can use it within a boot")
    ]


def test_at_the_cap_an_idle_server_is_given_back_for_a_job_it_does_not_fit() -> None:
    jobs = pipeline(job("a", minutes=1), job("b", "a", gpu="A100", minutes=1), job("c", minutes=9))
    d = Drive(jobs, cap=1, provisioning=Provisioning.ON_DEMAND)
    server = d.rents()[0].server
    d.at(100.0, ServerReady(server))
    d.finish(640.0, d.start_of("c"))
    d.finish(700.0, d.start_of("a"))
    assert [r.server for r in d.releases()] == [server]
    assert d.rents()[-1].for_job == "b"


# -- renting ahead -------------------------------------------------------------------------------


def test_a_job_s_server_is_rented_one_boot_before_its_needs_are_expected_to_end() -> None:
    jobs = pipeline(job("a", gpu="4090", minutes=5), job("b", "a", gpu="A100"))
    d = Drive(jobs)
    assert [r.for_job for r in d.rents()] == ["a"]
    # a's server boots in 100 s, a runs 300 s: b's needs end at 400, so b rents at 300.
    (timer,) = [t for t in d.timers() if _book(t.token, "ahead")]
    assert timer.at == pytest.approx(400.0 - BOOT.expected_s)
    d.at(100.0, ServerReady(d.rent_for("a").server))
    out = d.at(300.0, TimerFired(timer.token))
    (rent,) = [c for c in out if isinstance(c, RentServer)]
    assert rent.for_job == "b" and rent.ahead and rent.quote.host == "c1"
    d.at(400.0, ServerReady(rent.server))
    d.finish(400.0, d.start_of("a"))
    assert d.start_of("b").server == rent.server  # no wait for a boot


def test_on_demand_provisioning_rents_only_once_a_job_is_ready() -> None:
    jobs = pipeline(job("a", gpu="4090", minutes=5), job("b", "a", gpu="A100"))
    d = Drive(jobs, provisioning=Provisioning.ON_DEMAND)
    d.at(100.0, ServerReady(d.rent_for("a").server))
    run_timers_until(d, 399.0)
    assert [r.for_job for r in d.rents()] == ["a"]
    d.finish(400.0, d.start_of("a"))
    assert d.rents()[-1].for_job == "b" and not d.rents()[-1].ahead


def test_a_job_without_an_estimate_or_history_is_not_planned_ahead_of() -> None:
    jobs = pipeline(job("a", gpu="4090", minutes=None), job("b", "a", gpu="A100"))
    d = Drive(jobs)
    assert [t for t in d.timers() if _book(t.token, "ahead")] == []


def test_past_durations_stand_in_for_a_missing_estimate() -> None:
    jobs = pipeline(job("a", gpu="4090", minutes=None), job("b", "a", gpu="A100"))
    d = Drive(jobs, durations_s={"a": 250.0})
    (timer,) = [t for t in d.timers() if _book(t.token, "ahead")]
    assert timer.at == pytest.approx(100.0 + 250.0 - BOOT.expected_s)


def test_measured_boots_replace_the_default_expected_boot() -> None:
    jobs = pipeline(job("a", gpu="4090"), job("x", gpu="4090"))
    d = Drive(jobs)
    d.at(40.0, ServerReady(d.rent_for("a").server))
    d.at(60.0, ServerReady(d.rent_for("x").server))
    assert d.book.expected_boot_s == pytest.approx(50.0)


# -- failures of servers and rents ---------------------------------------------------------------


def test_a_failed_rent_excludes_the_host_and_tries_the_next_offer() -> None:
    d = Drive(pipeline(job("a", gpu="4090")))
    first = d.rent_for("a")
    d.at(30.0, RentFailed(first.server, "sshd never answered", cost_usd=0.01))
    second = d.rent_for("a")
    assert (first.quote.host, second.quote.host) == ("b1", "b2")
    assert d.book.spent_usd == pytest.approx(0.01)


def test_an_attempt_fails_as_provisioning_once_every_offer_tried_failed() -> None:
    offers = tuple(Quote(f"h{i}", "RTX 3090", 1, 0.1 + i / 100) for i in range(9))
    d = Drive(pipeline(job("a", retries=0)), offers=offers)
    for n in range(MAX_OFFERS_PER_ATTEMPT):
        d.at(10.0 * (n + 1), RentFailed(d.rents()[-1].server, "did not start"))
    assert len({r.quote.host for r in d.rents()}) == MAX_OFFERS_PER_ATTEMPT
    # The attempt ended as an infrastructure failure: the scheduler retries it after a backoff,
    # on a host not tried yet.
    (retry,) = [t for t in d.timers() if isinstance(t.token, Wake)]
    d.at(retry.at, TimerFired(retry.token))
    assert d.rents()[-1].quote.host == f"h{MAX_OFFERS_PER_ATTEMPT}"


def test_a_fatal_rent_failure_stops_the_run() -> None:
    d = Drive(pipeline(job("a"), job("b")))
    out = d.at(5.0, RentFailed(d.rents()[0].server, "not enough balance", fatal=True))
    assert d.core.cancel_reason == "not enough balance"
    assert ReleaseServer(d.rents()[1].server, "the run is stopping") in out
    assert d.core.done
    assert {r.status for r in d.core.results()} == {JobStatus.CANCELLED}
    # Nothing more is rented in the decision that heard it: every create would fail alike.
    assert not [c for c in out if isinstance(c, RentServer)]


def test_a_rent_refused_for_the_job_itself_fails_it_without_blaming_the_host() -> None:
    d = Drive(pipeline(job("a", retries=0), job("b")))
    refused = d.rent_for("a")
    d.at(5.0, RentFailed(refused.server, "more than the pool allows", job_cannot_run=True))
    (ended,) = [c.attempt for c in d.said if isinstance(c, AttemptRecorded)]
    assert ended.failure is FailureKind.UNAVAILABLE and ended.message == "more than the pool allows"
    assert len(d.rents()) == 2  # no other host tried for it: b's is the other rent


def test_when_every_offer_left_failed_the_job_says_which_failed_and_why() -> None:
    d = Drive(pipeline(job("a", gpu="A100", retries=0)))
    d.at(10.0, RentFailed(d.rent_for("a").server, "server c1: sshd never answered"))
    (ended,) = [c.attempt for c in d.said if isinstance(c, AttemptRecorded)]
    assert ended.failure is FailureKind.PROVISIONING_FAILED  # retried, as any infra failure
    assert ended.message.startswith("1 offers failed to start: server c1: sshd never answered")


def test_a_lost_server_is_given_back_and_its_host_never_rented_again() -> None:
    d = Drive(pipeline(job("a", retries=0)), offers=OFFERS[:2])
    server = d.rents()[0].server
    d.at(100.0, ServerReady(server))
    out = d.at(150.0, ServerLost(server, "outbid"))
    assert ReleaseServer(server, "lost: outbid") in out
    d.finish(150.0, d.start_of("a"), FailureKind.SERVER_LOST)
    (retry,) = [t for t in d.timers() if isinstance(t.token, Wake)]
    d.at(retry.at, TimerFired(retry.token))
    assert d.rents()[-1].quote.host == "a2"


def test_a_cancel_gives_back_what_no_job_runs_on_and_ends_jobs_still_waiting() -> None:
    from runner.core.events import CancelAll, StopCause

    d = Drive(pipeline(job("a"), job("b", gpu="4090")))
    d.at(100.0, ServerReady(d.rent_for("a").server))
    out = d.at(110.0, CancelAll("interrupted", StopCause.INTERRUPTED))
    assert ReleaseServer(d.rent_for("b").server, "the run is stopping") in out
    completed = [c.result.job_id for c in out if isinstance(c, Settled)]
    assert completed == ["b"]  # a runs: it is killed and reports, b had nothing to kill
    d.finish(111.0, d.start_of("a"), FailureKind.CANCELLED)
    assert d.core.done and d.book.servers() == []


def test_a_server_is_not_kept_for_a_job_another_server_will_be_free_for() -> None:
    # x's server falls idle while a still runs; b, due when a ends, will run on a's server
    # (the one its need frees): x's is given back at once, not kept for b.
    jobs = pipeline(job("a", minutes=5), job("x", minutes=4), job("b", "a", minutes=1))
    d = Drive(jobs, provisioning=Provisioning.ON_DEMAND)
    a_server, x_server = d.rent_for("a").server, d.rent_for("x").server
    d.at(100.0, ServerReady(a_server))
    d.at(100.0, ServerReady(x_server))
    out = d.finish(340.0, d.start_of("x"))
    assert ReleaseServer(x_server, "no job waiting can use it within a boot") in out


def test_a_server_won_back_for_a_jobs_retry_is_kept_for_it_not_given_to_another_job() -> None:
    # A spot order outbid and re-bid: the job died with its container, the adapter kept the
    # server (no ServerLost), and the job's retry is due after a backoff. Another job waiting
    # at the cap must not take that server meanwhile, or the retry rents elsewhere.
    d = Drive(pipeline(job("a"), job("c")), cap=1)
    server = d.rent_for("a").server
    d.at(100.0, ServerReady(server))
    out = d.finish(130.0, d.start_of("a"), FailureKind.SERVER_LOST)
    assert not [c for c in out if isinstance(c, (StartOn, ReleaseServer))]
    assert d.book.wait_reason("c") == "cap"
    (retry,) = [t for t in d.timers() if isinstance(t.token, Wake)]
    out = d.at(retry.at, TimerFired(retry.token))
    assert StartOn("a", 2, server, 600.0) in out
    assert [r.for_job for r in d.rents()] == ["a"]  # the retry rented nothing
    # After the retry, the server is anyone's again: c runs on it.
    d.finish(retry.at + 60.0, d.start_of("a"))
    assert d.start_of("c").server == server


def test_a_won_back_server_is_not_given_back_for_a_ready_jobs_money() -> None:
    # The budget holds one rental: c, ready and short of money, must not take the kept
    # server's reservation by giving it back (as it does with a server rented ahead).
    d = Drive(pipeline(job("a"), job("c", gpu="4090")), cap=2, budget_usd=0.2)
    server = d.rent_for("a").server
    d.at(100.0, ServerReady(server))
    out = d.finish(130.0, d.start_of("a"), FailureKind.SERVER_LOST)
    assert ReleaseServer(server, "its money is needed by a job that is ready") not in out
    (retry,) = [t for t in d.timers() if isinstance(t.token, Wake)]
    assert StartOn("a", 2, server, 600.0) in d.at(retry.at, TimerFired(retry.token))


def test_a_host_being_given_back_is_not_rented_again_until_it_is_released() -> None:
    """One machine listed twice (as the marketplace lists a server on demand and as spot):
    a's listing does not fit b, so a's server is given back, and b's rent of the other listing
    on the same host waits for the release to be confirmed: sent before it, the create finds
    the server still rented (Clore's server-already-rented) and the host is blamed for it."""
    offers = (Quote("s1", "RTX 3090", 1, 0.30), Quote("s1", "RTX 3090 Ti", 1, 0.50))
    d = Drive(pipeline(job("a"), job("b", "a", gpu="3090 Ti")), cap=1, offers=offers)
    first = d.rent_for("a")
    d.at(100.0, ServerReady(first.server))
    out = d.finish(400.0, d.start_of("a"))
    assert [c.server for c in out if isinstance(c, ReleaseServer)] == [first.server]
    assert not [c for c in out if isinstance(c, RentServer)]  # s1 is still a's order
    out = d.at(401.0, ServerReleased(first.server))
    (rent,) = [c for c in out if isinstance(c, RentServer)]
    assert (rent.for_job, rent.quote.host, rent.quote.gpu_model) == ("b", "s1", "RTX 3090 Ti")


# -- the rental lifecycle: no rental for nothing, no server taken from its job -------------------


def test_a_chain_on_one_gpu_type_rents_one_server() -> None:
    """one -> two -> three, short jobs: each link is planned onto the server the one before runs
    on, so nothing is rented ahead for `three` while the chain runs on the first server."""
    d = Drive(
        pipeline(
            job("one", minutes=0.1),
            job("two", "one", minutes=0.1),
            job("three", "two", minutes=0.1),
        ),
        cap=3,
    )
    server = d.rent_for("one").server
    run_timers_until(d, 100.0)
    d.at(100.0, ServerReady(server))
    for name, end in (("one", 106.0), ("two", 112.0), ("three", 118.0)):
        start = d.start_of(name)
        assert start.server == server
        run_timers_until(d, end)
        d.finish(end, start)
    assert len(d.rents()) == 1


def test_a_link_further_down_a_chain_is_planned_onto_the_server_not_rented_ahead() -> None:
    # A boot takes 100 s; each job 60 s. While `one` boots, `two` and `three` are planned behind
    # it on its server, `four` too: they would wait less there than for a new server.
    jobs = [job("one", minutes=1.0)]
    for i, name in enumerate(("two", "three", "four")):
        jobs.append(job(name, ("one", "two", "three")[i], minutes=1.0))
    d = Drive(pipeline(*jobs), cap=3)
    run_timers_until(d, 99.0)
    assert [r.for_job for r in d.rents()] == ["one"]


def test_a_job_does_not_take_a_server_rented_for_another_that_would_rent_again() -> None:
    """`a` fits any RTX, `b` only a 4090. b's 4090 comes up first: a waits for its own 3090
    (which b cannot use) instead of taking the 4090 and making b rent a second one."""
    d = Drive(pipeline(job("a", gpu="RTX"), job("b", gpu="4090")), cap=3)
    a_rent, b_rent = d.rent_for("a"), d.rent_for("b")
    assert (a_rent.quote.gpu_model, b_rent.quote.gpu_model) == ("RTX 3090", "RTX 4090")
    out = d.at(50.0, ServerReady(b_rent.server))
    assert StartOn("b", 1, b_rent.server, 600.0) in out
    out = d.at(60.0, ServerReady(a_rent.server))
    assert StartOn("a", 1, a_rent.server, 600.0) in out
    assert len(d.rents()) == 2


def test_a_job_takes_a_server_rented_for_another_when_they_swap() -> None:
    # Both fit a 3090: the first up runs the best-ranked job, and the other job's server is
    # the one booting for it. Two rentals, as before, and no job rents again.
    d = Drive(pipeline(job("a", minutes=10.0), job("b", minutes=1.0)), cap=3)
    a_rent, b_rent = d.rent_for("a"), d.rent_for("b")
    out = d.at(50.0, ServerReady(b_rent.server))
    assert StartOn("a", 1, b_rent.server, 600.0) in out
    out = d.at(60.0, ServerReady(a_rent.server))
    assert StartOn("b", 1, a_rent.server, 600.0) in out
    assert len(d.rents()) == 2


def _book(token: object, what: str) -> bool:
    """The book's timer of that kind."""
    return isinstance(token, BookTimer) and token.what == what


def _of(token: object) -> object:
    """What a book timer is about (a job, a server, a time)."""
    return token.of if isinstance(token, BookTimer) else None
