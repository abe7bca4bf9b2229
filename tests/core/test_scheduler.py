"""The scheduling core, driven directly (events in, commands out) and through the simulator.

Every scenario through `simulate` runs against both ways of handing jobs over: `run`'s fixed set
(one add) and `serve`'s jobs over time (a job arrives once its needs settled, as a submission
needing earlier ones does); both must decide the same, job by job. Every test is hermetic:
times are plain numbers passed in, nothing sleeps or reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    CancelAll,
    Command,
    KillAttempt,
    SetTimer,
    Settled,
    StartAttempt,
    StopCause,
    TimerFired,
    Wake,
)
from runner.core.model import (
    Attempt,
    Condition,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    Priority,
    RunStatus,
)
from runner.core.outcome import run_status
from runner.core.retry import MAX_INFRA_RETRIES, backoff_s
from runner.core.scheduler import Scheduler
from runner.core.simulate import Outcome, SimulationResult
from runner.core.simulate import simulate as simulate_one

Run = tuple[float, FailureKind | None]  # one attempt: seconds it runs, failure kind or None

PASS: Run = (10.0, None)
FAIL: Run = (10.0, FailureKind.TEST_FAILURE)

# -- helpers -------------------------------------------------------------------------------------


def decisions(sim: SimulationResult) -> dict[str, tuple[JobStatus, str, int, str]]:
    return {r.job_id: (r.status, r.reason, len(r.attempts), r.failure_origin) for r in sim.results}


def simulate(jobs: Sequence[Job], capacity: int, outcome: Outcome, **kw: Any) -> SimulationResult:
    """The scenario as `run` hands it over, checked against `serve`'s way: same decisions."""
    at_once = simulate_one(jobs, capacity, outcome, **kw)
    over_time = simulate_one(jobs, capacity, outcome, arrival="over_time", **kw)
    assert decisions(over_time) == decisions(at_once)
    assert over_time.status is at_once.status
    return at_once


def fresh(jobs: Sequence[Job], capacity: int, now: float = 0.0) -> tuple[Scheduler, list[Command]]:
    core = Scheduler(capacity)
    return core, core.add(jobs, {}, now)


def job(job_id: str, *needs: str, **kw: Any) -> Job:
    return Job(id=job_id, name=job_id, run="true", needs=needs, **kw)


def pipeline(*jobs: Job) -> list[Job]:
    """Jobs in file order (index = position)."""
    return [replace(j, index=i) for i, j in enumerate(jobs)]


def outcomes(
    table: Mapping[str, Sequence[Run]],
    default: Run = PASS,
) -> Outcome:
    """Per job, one (duration, failure) per attempt; the last entry repeats."""

    def outcome(job_id: str, attempt: int) -> Run:
        seq = table.get(job_id)
        if not seq:
            return default
        return seq[min(attempt, len(seq)) - 1]

    return outcome


def by_id(sim: SimulationResult | Iterable[JobResult]) -> dict[str, JobResult]:
    results = sim.results if isinstance(sim, SimulationResult) else sim
    return {r.job_id: r for r in results}


def started(commands: Iterable[Command]) -> list[str]:
    return [c.job_id for c in commands if isinstance(c, StartAttempt)]


def timers(commands: Iterable[Command]) -> list[SetTimer]:
    return [c for c in commands if isinstance(c, SetTimer)]


def kills(commands: Iterable[Command]) -> list[KillAttempt]:
    return [c for c in commands if isinstance(c, KillAttempt)]


def completed(commands: Iterable[Command]) -> dict[str, JobResult]:
    return {c.result.job_id: c.result for c in commands if isinstance(c, Settled)}


def finished(
    job_id: str,
    number: int,
    began: float,
    end: float,
    failure: FailureKind | None = None,
    message: str = "",
) -> AttemptEnded:
    code = 0 if failure is None else (1 if failure is FailureKind.TEST_FAILURE else None)
    return AttemptEnded(job_id, Attempt(number, began, end, code, failure, message))


def start_times(sim: SimulationResult) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for at, job_id in sim.starts:
        out.setdefault(job_id, []).append(at)
    return out


def peak_concurrency(results: Iterable[JobResult]) -> int:
    """Recount concurrency from the recorded attempts (an end at t frees the slot for t)."""
    edges: list[tuple[float, int]] = []
    for r in results:
        for a in r.attempts:
            edges += [(a.started_at, 1), (a.finished_at, -1)]
    level = peak = 0
    for _, delta in sorted(edges):  # -1 sorts before +1 at the same time
        level += delta
        peak = max(peak, level)
    return peak


# -- every status, with its reason -----------------------------------------------------------


def test_passed_records_the_attempt() -> None:
    sim = simulate(pipeline(job("a")), 1, outcomes({"a": [(7.0, None)]}), start_time=100.0)
    (a,) = sim.results
    assert (a.status, a.reason, a.exit_code) == (JobStatus.PASSED, "", 0)
    assert [(x.number, x.started_at, x.finished_at) for x in a.attempts] == [(1, 100.0, 107.0)]
    assert sim.status is RunStatus.PASSED
    assert sim.makespan_s == 7.0


def test_failed_carries_the_attempt_message_or_the_kind() -> None:
    core, out = fresh(pipeline(job("a"), job("b")), 2, 0.0)
    assert started(out) == ["a", "b"]
    out = core.handle(finished("a", 1, 0, 5, FailureKind.TEST_FAILURE, "exit code 2"), 5.0)
    out += core.handle(finished("b", 1, 0, 6, FailureKind.TEST_FAILURE), 6.0)
    assert completed(out)["a"].status is JobStatus.FAILED
    assert completed(out)["a"].reason == "exit code 2"
    assert completed(out)["b"].reason == "test_failure"
    assert completed(out)["b"].exit_code == 1
    assert core.idle
    jobs = {j.id: j for j in pipeline(job("a"), job("b"))}
    assert run_status(completed(out).values(), jobs, None) is RunStatus.FAILED


def test_timed_out_after_its_own_timeout() -> None:
    jobs = pipeline(job("slow", timeout_s=30.0))
    sim = simulate(jobs, 1, outcomes({"slow": [(1000.0, None)]}))
    (r,) = sim.results
    assert r.status is JobStatus.TIMED_OUT
    assert r.reason == "timed out after 30 s"
    assert [(a.started_at, a.finished_at, a.failure) for a in r.attempts] == [
        (0.0, 30.0, FailureKind.TIMEOUT)
    ]
    assert sim.makespan_s == 30.0
    assert sim.status is RunStatus.FAILED


def test_error_when_infrastructure_keeps_failing() -> None:
    sim = simulate(pipeline(job("a")), 1, outcomes({"a": [(3.0, FailureKind.SERVER_LOST)]}))
    (r,) = sim.results
    assert r.status is JobStatus.ERROR
    assert r.reason == "server_lost"
    assert len(r.attempts) == 1 + MAX_INFRA_RETRIES
    assert sim.status is RunStatus.ERROR


def test_skipped_and_cancelled() -> None:
    jobs = pipeline(job("build"), job("test", "build"), job("other", timeout_s=100.0))
    sim = simulate(jobs, 2, outcomes({"build": [FAIL], "other": [(50.0, None)]}), cancel_at=20.0)
    r = by_id(sim)
    assert (r["test"].status, r["test"].reason) == (
        JobStatus.SKIPPED,
        "needs 'build', which failed",
    )
    assert r["test"].attempts == ()
    assert (r["other"].status, r["other"].reason) == (JobStatus.CANCELLED, "cancelled")
    assert [a.failure for a in r["other"].attempts] == [FailureKind.CANCELLED]
    assert r["other"].attempts[0].finished_at == 20.0


# -- the skip cascade and if: ----------------------------------------------------------------


def test_skip_cascade_is_transitive_and_names_the_cause() -> None:
    jobs = pipeline(
        job("build"),
        job("test", "build"),
        job("package", "test"),
        job("deploy", "package", "lint"),
        job("lint"),
    )
    sim = simulate(jobs, 3, outcomes({"build": [FAIL]}))
    r = by_id(sim)
    assert r["build"].status is JobStatus.FAILED
    assert r["lint"].status is JobStatus.PASSED
    assert r["test"].reason == "needs 'build', which failed"
    assert r["package"].reason == "needs 'test', which was skipped"
    assert r["deploy"].reason == "needs 'package', which was skipped"
    assert {r[j].status for j in ("test", "package", "deploy")} == {JobStatus.SKIPPED}
    assert sorted(j for _, j in sim.starts) == ["build", "lint"]
    assert sim.status is RunStatus.FAILED


@pytest.mark.parametrize(
    ("build", "word"),
    [
        ((10.0, None), "timed out"),  # runs past its 5 s timeout
        ((1.0, FailureKind.SERVER_LOST), "hit an infrastructure error"),
    ],
)
def test_skip_reason_names_how_the_need_ended(build: Run, word: str) -> None:
    jobs = pipeline(job("build", timeout_s=5.0), job("test", "build"))
    sim = simulate(jobs, 1, outcomes({"build": [build]}))
    assert by_id(sim)["test"].reason == f"needs 'build', which {word}"


def test_always_runs_after_success_and_failure_failure_only_after_failure() -> None:
    def run(build: Run) -> dict[str, JobResult]:
        jobs = pipeline(
            job("build"),
            job("test", "build"),
            job("report", "test", condition=Condition.ALWAYS),
            job("on-fail", "test", condition=Condition.FAILURE),
        )
        return by_id(simulate(jobs, 2, outcomes({"build": [build]})))

    bad = run(FAIL)
    assert bad["report"].status is JobStatus.PASSED
    assert bad["on-fail"].status is JobStatus.PASSED  # the failure is two levels up
    good = run(PASS)
    assert good["report"].status is JobStatus.PASSED
    assert good["on-fail"].status is JobStatus.SKIPPED
    assert good["on-fail"].reason == "runs on failure(), and nothing it needs failed"


def test_cancelling_the_run_cancels_always_jobs_too() -> None:
    jobs = pipeline(job("a"), job("cleanup", "a", condition=Condition.ALWAYS))
    sim = simulate(jobs, 1, outcomes({"a": [(100.0, None)]}), cancel_at=10.0)
    r = by_id(sim)
    assert r["a"].status is JobStatus.CANCELLED
    assert r["cleanup"].status is JobStatus.CANCELLED  # cancelling the run starts nothing more
    assert [j for _, j in sim.starts] == ["a"]


def test_continue_on_error_fails_the_job_but_not_the_run() -> None:
    jobs = pipeline(job("flaky", continue_on_error=True), job("next", "flaky"))
    sim = simulate(jobs, 1, outcomes({"flaky": [FAIL]}))
    r = by_id(sim)
    assert r["flaky"].status is JobStatus.FAILED
    assert r["next"].status is JobStatus.PASSED
    assert sim.status is RunStatus.PASSED


def test_continue_on_error_does_not_trigger_failure_jobs() -> None:
    jobs = pipeline(
        job("flaky", continue_on_error=True),
        job("on-fail", "flaky", condition=Condition.FAILURE),
    )
    r = by_id(simulate(jobs, 1, outcomes({"flaky": [FAIL]})))
    assert r["on-fail"].status is JobStatus.SKIPPED


# -- matrix fail-fast --------------------------------------------------------------------------


def matrix(fail_fast: bool) -> list[Job]:
    return pipeline(
        *(
            job(f"train-{g}", group="train", matrix={"gpu": g}, fail_fast=fail_fast)
            for g in ("a", "b", "c", "d")
        ),
        job("eval", "train-a", "train-b", "train-c", "train-d"),
        job("solo"),
    )


def test_fail_fast_cancels_running_and_pending_siblings() -> None:
    table: dict[str, list[Run]] = {
        "train-a": [(5.0, FailureKind.TEST_FAILURE)],
        "train-b": [(50.0, None)],
    }
    sim = simulate(matrix(fail_fast=True), 2, outcomes(table))
    r = by_id(sim)
    assert r["train-a"].status is JobStatus.FAILED
    reason = "fail-fast: 'train-a' failed"
    # running when train-a failed: killed at 5 s
    assert (r["train-b"].status, r["train-b"].reason) == (JobStatus.CANCELLED, reason)
    assert [(a.finished_at, a.failure) for a in r["train-b"].attempts] == [
        (5.0, FailureKind.CANCELLED)
    ]
    # not started yet: cancelled without ever running
    for j in ("train-c", "train-d"):
        assert (r[j].status, r[j].reason, r[j].attempts) == (JobStatus.CANCELLED, reason, ())
    assert r["eval"].status is JobStatus.SKIPPED
    assert r["solo"].status is JobStatus.PASSED  # not a sibling
    assert {j for _, j in sim.starts} == {"train-a", "train-b", "solo"}
    assert sim.status is RunStatus.FAILED


def test_fail_fast_false_lets_siblings_finish() -> None:
    table: dict[str, list[Run]] = {
        "train-a": [(5.0, FailureKind.TEST_FAILURE)],
        "train-b": [(50.0, None)],
    }
    sim = simulate(matrix(fail_fast=False), 2, outcomes(table))
    r = by_id(sim)
    assert [r[f"train-{g}"].status for g in "abcd"] == [JobStatus.FAILED] + [JobStatus.PASSED] * 3
    assert r["eval"].reason == "needs 'train-a', which failed"


def test_fail_fast_waits_for_retries_to_run_out() -> None:
    jobs = [replace(j, retries=1) if j.id == "train-a" else j for j in matrix(fail_fast=True)]
    sim = simulate(jobs, 4, outcomes({"train-a": [FAIL, PASS]}))
    assert {r.status for r in sim.results} == {JobStatus.PASSED}


# -- retries ---------------------------------------------------------------------------------


def test_test_failure_spends_retries_with_backoff() -> None:
    sim = simulate(pipeline(job("a", retries=2)), 1, outcomes({"a": [FAIL, FAIL, PASS]}))
    (r,) = sim.results
    assert r.status is JobStatus.PASSED
    # attempt 1 ends at 10, +2 s backoff; attempt 2 ends at 22, +4 s backoff
    assert [(a.number, a.started_at) for a in r.attempts] == [(1, 0.0), (2, 12.0), (3, 26.0)]
    assert (backoff_s(1), backoff_s(2)) == (2.0, 4.0)


def test_test_failure_without_retries_left_fails() -> None:
    sim = simulate(pipeline(job("a", retries=1)), 1, outcomes({"a": [FAIL]}))
    (r,) = sim.results
    assert (r.status, len(r.attempts)) == (JobStatus.FAILED, 2)


def test_retry_is_a_timer_not_an_immediate_start() -> None:
    core, _ = fresh(pipeline(job("a", retries=1)), 1, 0.0)
    out = core.handle(finished("a", 1, 0, 10, FailureKind.TEST_FAILURE), 10.0)
    assert started(out) == [] and not completed(out)
    assert [t.at for t in timers(out)] == [12.0]
    out = core.handle(TimerFired(timers(out)[0].token), 12.0)
    assert [c for c in out if isinstance(c, StartAttempt)] == [StartAttempt("a", 2, 3600.0)]


@pytest.mark.parametrize(
    "kind",
    [FailureKind.SERVER_LOST, FailureKind.SSH_FAILED, FailureKind.PROVISIONING_FAILED],
)
def test_infrastructure_failures_do_not_spend_retries(kind: FailureKind) -> None:
    infra = (1.0, kind)
    ok = simulate(pipeline(job("a")), 1, outcomes({"a": [infra] * MAX_INFRA_RETRIES + [PASS]}))
    (r,) = ok.results
    assert r.status is JobStatus.PASSED  # retries=0, yet it came back MAX_INFRA_RETRIES times
    assert [a.failure for a in r.attempts] == [kind] * MAX_INFRA_RETRIES + [None]
    bad = simulate(pipeline(job("a", retries=5)), 1, outcomes({"a": [infra]}))
    (r,) = bad.results
    assert (r.status, len(r.attempts)) == (JobStatus.ERROR, 1 + MAX_INFRA_RETRIES)


def test_infrastructure_and_test_failures_have_separate_budgets() -> None:
    lost = (1.0, FailureKind.SERVER_LOST)
    sim = simulate(pipeline(job("a", retries=1)), 1, outcomes({"a": [FAIL, lost, lost, FAIL]}))
    (r,) = sim.results
    assert r.status is JobStatus.FAILED  # the second test failure is one too many
    assert len(r.attempts) == 4


# -- timeouts --------------------------------------------------------------------------------


def test_job_timeout_kills_at_start_plus_timeout_then_retries() -> None:
    core, out = fresh(pipeline(job("a", timeout_s=30.0, retries=1)), 1, 5.0)
    assert [c for c in out if isinstance(c, StartAttempt)] == [StartAttempt("a", 1, 30.0)]
    assert timers(out) == []  # the clock starts when the script does, not while renting
    (timer,) = timers(core.handle(AttemptPlaced("a", 1), 5.0))
    assert timer.at == 35.0
    out = core.handle(TimerFired(timer.token), 35.0)
    assert out == [KillAttempt("a", FailureKind.TIMEOUT)]
    # the backend reports the kill as a signal death; the core records it as the timeout
    out = core.handle(finished("a", 1, 5, 35.2, FailureKind.TEST_FAILURE), 35.2)
    assert not completed(out)
    (retry,) = timers(out)
    assert retry.at == 37.2
    out = core.handle(TimerFired(retry.token), 37.2)
    assert started(out) == ["a"]
    core.handle(AttemptPlaced("a", 2), 37.2)
    out = core.handle(finished("a", 2, 37.2, 40), 40.0)
    r = completed(out)["a"]
    assert r.status is JobStatus.PASSED
    assert [(a.failure, a.message) for a in r.attempts] == [
        (FailureKind.TIMEOUT, "timed out after 30 s"),
        (None, ""),
    ]


def test_run_timeout_cancels_everything_and_fails_the_run() -> None:
    jobs = pipeline(job("a"), job("b", "a"), job("c"), job("later", not_before=500.0))
    sim = simulate(jobs, 2, outcomes({"a": [(100.0, None)]}), run_timeout_s=50.0)
    r = by_id(sim)
    reason = "the run timed out after 50 s"
    assert r["c"].status is JobStatus.PASSED  # finished before the deadline
    for j in ("a", "b", "later"):
        assert (r[j].status, r[j].reason) == (JobStatus.CANCELLED, reason)
    assert r["a"].attempts[0].finished_at == 50.0
    assert sim.makespan_s == 50.0
    assert sim.status is RunStatus.FAILED
    assert "later" not in start_times(sim)


def test_a_run_timeout_is_a_cancel_with_its_cause() -> None:
    core, _ = fresh(pipeline(job("a")), 1, 10.0)
    out = core.handle(CancelAll("the run timed out after 600 s", StopCause.TIMED_OUT), 610.0)
    assert kills(out) == [KillAttempt("a", FailureKind.CANCELLED)]
    assert core.stop_cause is StopCause.TIMED_OUT


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_kills_running_cancels_pending_and_starts_nothing_more() -> None:
    jobs = pipeline(job("a"), job("b"), job("c"), job("d", "a"))
    core, out = fresh(jobs, 2, 0.0)
    assert started(out) == ["a", "b"]
    out = core.handle(CancelAll("interrupted", StopCause.INTERRUPTED), 3.0)
    assert sorted(kills(out), key=lambda k: k.job_id) == [
        KillAttempt("a", FailureKind.CANCELLED),
        KillAttempt("b", FailureKind.CANCELLED),
    ]
    assert {j: r.status for j, r in completed(out).items()} == {
        "c": JobStatus.CANCELLED,
        "d": JobStatus.CANCELLED,
    }
    assert started(out) == []
    out = core.handle(finished("a", 1, 0, 3.1, FailureKind.TEST_FAILURE), 3.1)
    assert started(out) == []  # a freed slot does not start anything
    assert completed(out)["a"].status is JobStatus.CANCELLED
    assert completed(out)["a"].reason == "interrupted"
    core.handle(finished("b", 1, 0, 3.2, FailureKind.TEST_FAILURE), 3.2)
    assert core.idle
    assert core.handle(CancelAll("again", StopCause.INTERRUPTED), 4.0) == []


def test_cancel_does_not_retry_a_job_waiting_for_its_retry() -> None:
    core, _ = fresh(pipeline(job("a", retries=3)), 1, 0.0)
    out = core.handle(finished("a", 1, 0, 10, FailureKind.TEST_FAILURE), 10.0)
    (retry,) = timers(out)
    out = core.handle(CancelAll("stop", StopCause.INTERRUPTED), 11.0)
    assert completed(out)["a"].status is JobStatus.CANCELLED
    assert len(completed(out)["a"].attempts) == 1
    assert core.handle(TimerFired(retry.token), retry.at) == []


def test_cancelled_run_is_not_reported_as_passed() -> None:
    sim = simulate(pipeline(job("a"), job("b", "a")), 1, outcomes({}), cancel_at=5.0)
    assert {r.status for r in sim.results} == {JobStatus.CANCELLED}
    assert sim.status is RunStatus.INTERRUPTED


# -- the concurrency cap ---------------------------------------------------------------------


def random_dag(n: int, seed: int) -> tuple[list[Job], Outcome]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        needs = sorted({f"j{rng.randrange(i)}" for _ in range(rng.randint(0, 3))} if i else set())
        jobs.append(job(f"j{i}", *needs))
    durations = {j.id: float(rng.randint(1, 60)) for j in jobs}
    return pipeline(*jobs), lambda job_id, _attempt: (durations[job_id], None)


@pytest.mark.parametrize(("n", "cap"), [(40, 1), (200, 3), (500, 10)])
def test_cap_is_never_exceeded_and_is_reached(n: int, cap: int) -> None:
    jobs, outcome = random_dag(n, seed=n)
    sim = simulate(jobs, cap, outcome)
    assert len(sim.starts) == n
    assert sim.max_running == cap
    assert peak_concurrency(sim.results) == cap


def test_cap_with_retries_timeouts_and_failures() -> None:
    jobs = pipeline(*(job(f"j{i}", retries=2, timeout_s=20.0) for i in range(30)))
    table: dict[str, list[Run]] = {f"j{i}": [FAIL, (50.0, None), PASS] for i in range(0, 30, 3)}
    sim = simulate(jobs, 4, outcomes(table))
    assert sim.max_running == 4
    assert peak_concurrency(sim.results) == 4
    assert {r.status for r in sim.results} == {JobStatus.PASSED}


def test_each_finish_frees_exactly_one_slot() -> None:
    core, out = fresh(pipeline(*(job(f"j{i}") for i in range(5))), 2, 0.0)
    assert started(out) == ["j0", "j1"]
    assert started(core.handle(finished("j0", 1, 0, 1), 1.0)) == ["j2"]
    assert started(core.handle(finished("j2", 1, 1, 2), 2.0)) == ["j3"]
    assert core.attempts_out == 2
    assert {j: core.state(j).phase.value for j in ("j1", "j3", "j4")} == {  # type: ignore[union-attr]
        "j1": "placing",
        "j3": "placing",
        "j4": "ready",
    }


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Scheduler(0)


# -- order -----------------------------------------------------------------------------------


def test_priority_then_upward_rank_then_file_order() -> None:
    jobs = pipeline(
        job("low", priority=Priority.LOW),
        job("normal-1"),
        job("normal-2"),
        job("normal-long", estimate_s=100.0),
        job("urgent", priority=Priority.URGENT),
        job("high", priority=Priority.HIGH),
        job("normal-chain"),
        job("tail", "normal-chain", estimate_s=95.0),  # gives normal-chain rank 10 + 95
    )
    jobs = [j if j.estimate_s else replace(j, estimate_s=10.0) for j in jobs]
    sim = simulate(jobs, 1, outcomes({}))
    order = [j for _, j in sim.starts]
    assert order == [
        "urgent",
        "high",
        "normal-chain",
        "normal-long",
        "tail",  # ready after normal-chain; rank 95 beats the short normal ones
        "normal-1",
        "normal-2",
        "low",
    ]


def test_no_head_of_line_blocking() -> None:
    """A high-priority job waiting on a low-priority one neither blocks it nor deadlocks."""
    jobs = pipeline(
        job("deploy", "build", priority=Priority.URGENT),
        job("build", priority=Priority.LOW),
        job("docs", priority=Priority.LOW),
    )
    sim = simulate(jobs, 1, outcomes({}))
    assert [j for _, j in sim.starts] == ["build", "deploy", "docs"]
    assert {r.status for r in sim.results} == {JobStatus.PASSED}


def test_lower_priority_ready_job_runs_while_the_high_one_waits() -> None:
    jobs = pipeline(
        job("slow"),
        job("urgent", "slow", priority=Priority.URGENT),
        job("idle", priority=Priority.LOW),
    )
    sim = simulate(jobs, 2, outcomes({"slow": [(100.0, None)]}))
    assert start_times(sim) == {"slow": [0.0], "idle": [0.0], "urgent": [100.0]}


# -- not-before ------------------------------------------------------------------------------


def test_not_before_is_a_timer_and_the_job_starts_exactly_then() -> None:
    core, out = fresh(pipeline(job("nightly", not_before=1000.0), job("now")), 2, 0.0)
    assert started(out) == ["now"]
    assert SetTimer(1000.0, Wake("nightly")) in out
    out = core.handle(finished("now", 1, 0, 5), 5.0)
    assert started(out) == []  # a freed slot does not let it start early
    out = core.handle(TimerFired(Wake("nightly")), 1000.0)
    assert started(out) == ["nightly"]


def test_not_before_in_simulation() -> None:
    jobs = pipeline(job("a", not_before=300.0), job("b", "a"), job("c", not_before=-5.0))
    sim = simulate(jobs, 3, outcomes({}))
    assert start_times(sim) == {"c": [0.0], "a": [300.0], "b": [310.0]}


def test_not_before_already_passed_when_needs_finish() -> None:
    jobs = pipeline(job("a"), job("b", "a", not_before=5.0))
    core, _ = fresh(jobs, 1, 0.0)
    out = core.handle(finished("a", 1, 0, 10), 10.0)
    assert started(out) == ["b"]
    assert Wake("b") not in [t.token for t in timers(out)]


def test_a_need_skipped_for_nothing_to_handle_skips_success_jobs() -> None:
    """As in GitHub Actions: success() wants every need passed, not merely none failed."""
    jobs = pipeline(job("on-fail", condition=Condition.FAILURE), job("b", "on-fail"))
    sim = simulate(jobs, 1, outcomes({}))
    by_id = {r.job_id: r for r in sim.results}
    assert by_id["b"].status is JobStatus.SKIPPED
    assert by_id["b"].reason == "needs 'on-fail', which was skipped"


def test_not_before_timer_is_asked_for_once() -> None:
    # b becomes ready during start() because its only need is skipped at once
    jobs = pipeline(
        job("on-fail", condition=Condition.FAILURE),
        job("b", "on-fail", not_before=50.0, condition=Condition.ALWAYS),
    )
    _, out = fresh(jobs, 1)
    assert [t.token for t in timers(out)] == [Wake("b")]


def test_a_job_readied_during_start_is_queued_once() -> None:
    """Otherwise a stale queue entry starts its retry with no backoff."""
    jobs = pipeline(
        job("on-fail", condition=Condition.FAILURE),  # skipped at start: nothing failed
        job("first", priority=Priority.HIGH),
        job("b", "on-fail", retries=1, condition=Condition.ALWAYS),
    )
    sim = simulate(jobs, 1, outcomes({"b": [FAIL, PASS]}))
    assert start_times(sim)["b"] == [10.0, 22.0]


# -- stale events ----------------------------------------------------------------------------


def test_stale_timeout_timers_are_ignored() -> None:
    core, _ = fresh(pipeline(job("a", timeout_s=30.0, retries=1)), 1, 0.0)
    (t1,) = timers(core.handle(AttemptPlaced("a", 1), 0.0))
    out = core.handle(finished("a", 1, 0, 5, FailureKind.TEST_FAILURE), 5.0)
    (retry,) = timers(out)
    core.handle(TimerFired(retry.token), 7.0)
    assert core.handle(AttemptPlaced("a", 1), 7.0) == []  # a stale report arms nothing
    (t2,) = timers(core.handle(AttemptPlaced("a", 2), 7.0))
    assert t1.token != t2.token
    assert core.handle(TimerFired(t1.token), 30.0) == []  # attempt 1's deadline, attempt 2 runs
    assert core.attempts_out == 1
    assert core.handle(TimerFired(t2.token), 37.0) == [KillAttempt("a", FailureKind.TIMEOUT)]
    assert core.handle(TimerFired(t2.token), 37.0) == []  # already being killed


def test_timeout_timer_after_the_job_passed_is_ignored() -> None:
    core, _ = fresh(pipeline(job("a", timeout_s=30.0)), 1, 0.0)
    (t1,) = timers(core.handle(AttemptPlaced("a", 1), 0.0))
    out = core.handle(finished("a", 1, 0, 5), 5.0)
    assert core.handle(TimerFired(t1.token), 30.0) == []
    assert completed(out)["a"].status is JobStatus.PASSED


def test_stale_and_duplicate_finish_events_are_ignored() -> None:
    core, _ = fresh(pipeline(job("a", retries=1), job("b", "a")), 1, 0.0)
    assert core.handle(finished("a", 2, 0, 1), 1.0) == []  # no attempt 2 is running
    assert core.handle(finished("zzz", 1, 0, 1), 1.0) == []  # not a job we know running
    out = core.handle(finished("a", 1, 0, 2), 2.0)
    assert completed(out)["a"].status is JobStatus.PASSED
    assert started(out) == ["b"]
    assert core.handle(finished("a", 1, 0, 2, FailureKind.TEST_FAILURE), 3.0) == []
    assert "a" not in core  # settled and forgotten


@pytest.mark.parametrize("token", ["junk", (), ("nonsense", "a"), 42])
def test_unknown_timer_tokens_are_ignored(token: Hashable) -> None:
    core, _ = fresh(pipeline(job("a")), 1, 0.0)
    assert core.handle(TimerFired(token), 1.0) == []
    assert core.attempts_out == 1


def test_run_timeout_after_the_run_finished_changes_nothing() -> None:
    core, _ = fresh(pipeline(job("a")), 1)
    core.handle(finished("a", 1, 0, 60), 60.0)
    assert core.idle
    assert core.handle(CancelAll("timed out", StopCause.TIMED_OUT), 60.0) == []
    assert core.stop_cause is None


def test_not_before_timer_for_a_settled_job_is_ignored() -> None:
    core, _ = fresh(pipeline(job("a", not_before=100.0)), 1, 0.0)
    core.handle(CancelAll("stop", StopCause.INTERRUPTED), 10.0)
    assert core.handle(TimerFired(Wake("a")), 100.0) == []


# -- the run's status ------------------------------------------------------------------------


def test_status_test_failure_outranks_infrastructure_error() -> None:
    lost = (1.0, FailureKind.SSH_FAILED)
    both = simulate(pipeline(job("a"), job("b")), 2, outcomes({"a": [lost], "b": [FAIL]}))
    assert {r.status for r in both.results} == {JobStatus.ERROR, JobStatus.FAILED}
    assert both.status is RunStatus.FAILED
    infra = simulate(pipeline(job("a"), job("b")), 2, outcomes({"a": [lost]}))
    assert infra.status is RunStatus.ERROR
    timeout = simulate(
        pipeline(job("a"), job("b", timeout_s=1.0)), 2, outcomes({"a": [lost], "b": [PASS]})
    )
    assert timeout.status is RunStatus.FAILED  # timed_out counts as a test failure


def test_status_ignores_continue_on_error_jobs_and_honours_interrupted() -> None:
    jobs = pipeline(
        job("a", continue_on_error=True),
        job("b", continue_on_error=True),
        job("c", continue_on_error=True, timeout_s=1.0),
        job("d", "a"),
    )
    table: dict[str, list[Run]] = {"a": [FAIL], "b": [(1.0, FailureKind.PROVISIONING_FAILED)]}
    sim = simulate(jobs, 4, outcomes(table))
    assert [r.status for r in sim.results] == [
        JobStatus.FAILED,
        JobStatus.ERROR,
        JobStatus.TIMED_OUT,
        JobStatus.PASSED,
    ]
    assert sim.status is RunStatus.PASSED
    by = {j.id: j for j in jobs}
    assert run_status(sim.results, by, StopCause.INTERRUPTED) is RunStatus.INTERRUPTED


def test_results_are_in_pipeline_order() -> None:
    jobs = pipeline(job("z"), job("y", "z"), job("x", priority=Priority.URGENT))
    sim = simulate(jobs, 1, outcomes({}))
    assert [r.job_id for r in sim.results] == ["z", "y", "x"]
    assert [j for _, j in sim.starts] == ["x", "z", "y"]


@pytest.mark.slow
def test_ten_thousand_deep_chain() -> None:
    jobs = pipeline(job("j0"), *(job(f"j{i}", f"j{i - 1}") for i in range(1, 10_000)))
    sim = simulate(jobs, 3, outcomes({}, default=(1.0, None)))
    assert sim.makespan_s == 10_000.0
    assert sim.max_running == 1


def test_a_skip_that_no_failure_caused_does_not_trigger_failure_jobs() -> None:
    """`b` is skipped only because the failure() job before it had nothing to handle: nothing
    failed anywhere, so a failure() job after `b` must not run."""
    jobs = pipeline(
        job("a"),
        job("on-fail", "a", condition=Condition.FAILURE),
        job("b", "on-fail"),
        job("alert", "b", condition=Condition.FAILURE),
    )
    sim = simulate(jobs, 1, outcomes({}))
    r = by_id(sim)
    assert r["b"].status is JobStatus.SKIPPED
    assert r["alert"].status is JobStatus.SKIPPED
    assert r["alert"].reason == "runs on failure(), and nothing it needs failed"
    assert [j for _, j in sim.starts] == ["a"]
