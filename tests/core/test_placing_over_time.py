"""The core with servers for jobs that arrive over time (`clore-run serve`), rule by rule:
events in, commands out, the time passed in by the test."""

from __future__ import annotations

from typing import Any

from runner.core.events import (
    AttemptEnded,
    BookTimer,
    HoldStarts,
    SetTimer,
    Settled,
    TimerFired,
    Wake,
)
from runner.core.model import Attempt, FailureKind, JobStatus
from runner.core.outcome import NeedOutcome
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import (
    CoreCommand,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerReady,
    StartOn,
)
from runner.core.scheduler import Entry, Phase
from runner.core.servers import ServerBook
from runner.core.simulate_market import ModelMarket
from tests.core.test_servers import BOOT, OFFERS, job

DAY = 86_400.0
T0 = 20_000 * DAY + 8 * 3600.0  # 08:00 UTC on some day


class Queue:
    """An ongoing core, fed as serve's loop feeds it."""

    def __init__(self, cap: int = 2, **book: Any) -> None:
        self.book = ServerBook((), cap, market=ModelMarket(OFFERS), boot=BOOT, now=T0, **book)
        self.core = PlacingCore((), self.book, ongoing=True, on_fatal=self._hold)
        self.said: list[CoreCommand] = []
        self.seq = 0

    @staticmethod
    def _hold(reason: str, now: float) -> HoldStarts:
        return HoldStarts(now + 60.0)

    def submit(self, now: float, *jobs: Any, settled: dict[str, NeedOutcome] | None = None) -> Any:
        entries = []
        for j in jobs:
            self.seq += 1
            entries.append(Entry(j, self.seq))
        out = self.core.add(entries, settled or {}, now)
        self.said.extend(out)
        return out

    def at(self, now: float, event: CoreEvent) -> list[CoreCommand]:
        out = self.core.handle(event, now)
        self.said.extend(out)
        return out

    def book_timers(self, kind: str) -> list[SetTimer]:
        return [
            c
            for c in self.said
            if isinstance(c, SetTimer) and isinstance(c.token, BookTimer) and c.token.what == kind
        ]

    def rents(self) -> list[RentServer]:
        return [c for c in self.said if isinstance(c, RentServer)]

    def start_of(self, job_id: str) -> StartOn:
        return next(c for c in reversed(self.said) if isinstance(c, StartOn) and c.job_id == job_id)

    def passes(self, now: float, job_id: str) -> list[CoreCommand]:
        start = self.start_of(job_id)
        return self.at(now, AttemptEnded(job_id, Attempt(start.attempt, now, now, 0, None)))


def test_a_job_submitted_while_another_runs_takes_its_server_when_it_ends() -> None:
    q = Queue(cap=1)
    q.submit(T0, job("a"))
    (rent,) = q.rents()
    q.at(T0 + 100, ServerReady(rent.server))
    q.submit(T0 + 150, job("b"))  # at the cap: it waits for a's server
    out = q.passes(T0 + 200, "a")
    assert StartOn("b", 1, rent.server, 600.0) in out
    assert len(q.rents()) == 1


def test_an_ongoing_core_keeps_going_when_its_queue_empties_and_gives_back_what_idles() -> None:
    q = Queue()
    q.submit(T0, job("a"))
    (rent,) = q.rents()
    q.at(T0 + 100, ServerReady(rent.server))
    out = q.passes(T0 + 200, "a")
    assert any(isinstance(c, Settled) for c in out)
    assert len(q.core) == 0 and not q.core.over  # no end of a run: no sweep, no finish
    # Nothing waits that could use it: given back now, by the book's rule, not the run's end.
    assert [c.reason for c in out if isinstance(c, ReleaseServer)] == [
        "no job waiting can use it within a boot"
    ]
    q.submit(T0 + 300, job("b"))  # and the next job rents again
    assert [r.for_job for r in q.rents()] == ["a", "b"]


def test_a_job_needing_one_settled_earlier_is_ready_at_once() -> None:
    q = Queue()
    q.submit(T0, job("b", "a"), settled={"a": NeedOutcome(JobStatus.PASSED, True, "")})
    assert [r.for_job for r in q.rents()] == ["b"]


def test_settled_jobs_are_forgotten_by_the_book() -> None:
    q = Queue(cap=1)
    q.submit(T0, job("a"), job("b", "a"))
    server = q.rents()[0].server
    q.at(T0 + 100, ServerReady(server))
    q.passes(T0 + 200, "a")
    assert q.book.jobs_known == 2  # a's dependent b still wants a server
    q.passes(T0 + 300, "b")
    assert q.book.jobs_known == 0


def test_a_daily_budget_makes_a_job_wait_for_the_next_day_not_fail() -> None:
    q = Queue(cap=2)
    # $0.10 of $0.15 spent today; a's worst case is $0.085 (0.30 $/h x (300 s boot + 600 s
    # timeout + 120 s)): it waits for tomorrow's budget.
    q.book.budget_per_day(0.15, 0.10, T0)
    q.submit(T0, job("a"))
    assert q.rents() == []
    state = q.core.state("a")
    assert state is not None and state.phase is Phase.PLACING
    assert state.server == "waiting for a server: the budget today cannot hold its worst case yet"
    (renew,) = q.book_timers("day")
    assert renew.at == 20_001 * DAY  # midnight UTC
    q.at(renew.at - 1, TimerFired(("other",)))
    assert q.rents() == []
    q.at(renew.at, TimerFired(renew.token))
    assert [r.for_job for r in q.rents()] == ["a"]


def test_a_job_over_a_whole_days_budget_fails_as_unavailable() -> None:
    q = Queue()
    q.book.budget_per_day(0.05, 0.0, T0)
    out = q.submit(T0, job("a", retries=0))
    (settled,) = [c for c in out if isinstance(c, Settled)]
    assert settled.result.status is JobStatus.ERROR
    assert settled.result.attempts[-1].failure is FailureKind.UNAVAILABLE
    assert "a day's budget" in settled.result.attempts[-1].message


def test_a_refused_key_holds_starts_for_a_while_and_then_rents_again() -> None:
    q = Queue()
    q.submit(T0, job("a"))
    first = q.rents()[0]
    out = q.at(T0 + 5, RentFailed(first.server, "the key was refused", fatal=True))
    assert not [c for c in out if isinstance(c, (RentServer, Settled))]  # nothing cancelled
    assert q.core.stop_reason is None
    (resume,) = q.book_timers("hold")
    assert resume.at == T0 + 65
    q.at(resume.at, TimerFired(resume.token))
    q.at(resume.at, TimerFired(Wake("x")))  # the scheduler's own timer is harmless
    assert [r.for_job for r in q.rents()] == ["a", "a"]


def test_why_a_job_waits_says_what_its_server_does() -> None:
    q = Queue(cap=1)
    q.submit(T0, job("a"), job("b", gpu="4090"))
    a, b = q.core.state("a"), q.core.state("b")
    assert a is not None and a.server == "renting a server for it (RTX 3090 #a1), booting"
    assert b is not None and b.server == "waiting for a server: 1 of 1 held (the cap)"
    q.at(T0 + 100, ServerReady(q.rents()[0].server))
    running = q.core.state("a")
    assert running is not None and running.server is None  # it has its server


def test_a_queue_tries_a_host_that_failed_again_an_hour_later() -> None:
    q = Queue(cap=3)
    q.submit(T0, job("a"))
    first = q.rents()[0]
    q.at(T0 + 10, RentFailed(first.server, "sshd never answered"))
    assert [r.quote.host for r in q.rents()] == ["a1", "a2"]
    q.submit(T0 + 300, job("b"))
    assert q.rents()[-1].quote.host == "a3"  # a1 is still excluded, a2 is a's
    q.submit(T0 + 3700, job("c"))  # an hour after a1 failed: the cheapest again
    assert q.rents()[-1].quote.host == "a1"


def test_a_chain_submitted_a_job_at_a_time_while_its_head_waits_on_a_running_job() -> None:
    # Nothing waits for a server while the chain grows: its raises are made once a job
    # waits, and then count the whole chain.
    q = Queue(cap=1)
    q.submit(T0, job("a"))
    (rent,) = q.rents()
    q.at(T0 + 100, ServerReady(rent.server))
    q.submit(T0 + 110, job("x", "a", minutes=12.0, index=1), job("c0", "a", minutes=1.0, index=2))
    for i in range(1, 20):  # c0 heads 20 minutes at the end: ahead of x's 12
        q.submit(T0 + 110 + i, job(f"c{i}", f"c{i - 1}", minutes=1.0, index=2 + i))
    out = q.passes(T0 + 200, "a")
    assert [c.job_id for c in out if isinstance(c, StartOn)] == ["c0"]


def test_dependents_submitted_later_raise_the_rank_of_a_waiting_job_they_need() -> None:
    q = Queue(cap=1)
    q.submit(T0, job("a"))
    (rent,) = q.rents()
    q.at(T0 + 100, ServerReady(rent.server))
    # p's remaining path is 12 minutes, q's 5: p goes first.
    q.submit(T0 + 110, job("p", minutes=12.0, index=1), job("q", index=2))
    q.submit(T0 + 120, job("r", "q"))  # q heads 10 minutes now: still behind p
    q.submit(T0 + 130, job("s", "r"))  # through r, 15 minutes: ahead of p
    out = q.passes(T0 + 200, "a")  # the one server held comes free: q takes it
    assert [c.job_id for c in out if isinstance(c, StartOn)] == ["q"]


def test_servers_in_use_count_a_rented_one_from_its_create_and_a_fixed_one_while_busy() -> None:
    q = Queue(cap=2)
    q.submit(T0, job("a"))
    (rent,) = q.rents()
    assert q.book.in_use == 1  # booting, nothing on it: billed all the same
    q.at(T0 + 100, ServerReady(rent.server))
    assert q.book.in_use == 1
    q.passes(T0 + 200, "a")  # nothing waits that could use it: given back
    assert q.book.in_use == 0
    fixed = ServerBook((), 2, fixed_hosts=[Quote("h1"), Quote("h2")], now=T0)
    core = PlacingCore((), fixed, ongoing=True)
    assert fixed.in_use == 0  # hosts that already exist, idle: no one's
    out = core.add([Entry(job("b"), 1)], {}, T0)
    (start,) = [c for c in out if isinstance(c, StartOn)]
    assert fixed.in_use == 1
    core.handle(AttemptEnded("b", Attempt(start.attempt, T0, T0 + 5, 0, None)), T0 + 5)
    assert fixed.in_use == 0
