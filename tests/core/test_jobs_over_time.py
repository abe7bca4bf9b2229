"""The scheduling core as `serve` drives it: jobs added over time, needs on jobs it has already
settled and forgotten, holds, single cancels, recovery state. Events in, commands out, times as
plain numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptRecorded,
    AttemptTimeout,
    CancelJob,
    Command,
    HoldOver,
    HoldStarts,
    KillAttempt,
    Requeued,
    SetTimer,
    Settled,
    StartAttempt,
    TimerFired,
    Wake,
)
from runner.core.model import Attempt, Condition, FailureKind, Job, JobResult, JobStatus, Priority
from runner.core.outcome import NeedOutcome, need_outcome
from runner.core.retry import MAX_INFRA_RETRIES
from runner.core.scheduler import Entry, JobState, Phase, Scheduler


def job(job_id: str, *needs: str, **kw: Any) -> Job:
    return Job(id=job_id, name=job_id, run="true", needs=needs, **kw)


def entries(*jobs: Job, start: int = 0) -> list[Entry]:
    return [Entry(j, start + i) for i, j in enumerate(jobs)]


def started(commands: Sequence[Command]) -> list[str]:
    return [c.job_id for c in commands if isinstance(c, StartAttempt)]


def completed(commands: Sequence[Command]) -> dict[str, tuple[JobStatus, str]]:
    return {
        c.result.job_id: (c.result.status, c.result.reason)
        for c in commands
        if isinstance(c, Settled)
    }


def finish(
    core: Scheduler, job_id: str, number: int, now: float, failure: FailureKind | None = None
) -> list[Command]:
    attempt = Attempt(number, now - 1, now, 0 if failure is None else 1, failure)
    return core.handle(AttemptEnded(job_id, attempt), now)


def test_ready_jobs_start_by_priority_then_submission_order() -> None:
    core = Scheduler(1)
    assert started(core.add(entries(job("blocker")), {}, 0)) == ["blocker"]
    later = core.add(
        entries(
            job("low", priority=Priority.LOW),
            job("plain"),
            job("urgent", priority=Priority.URGENT),
            job("plain2"),
            start=1,
        ),
        {},
        0,
    )
    assert started(later) == []
    order = []
    for name in ("blocker", "urgent", "plain", "plain2"):
        out = finish(core, name, 1, 10)
        order += started(out)
    assert order == ["urgent", "plain", "plain2", "low"]


def test_a_later_dependent_raises_the_rank_of_a_queued_job() -> None:
    core = Scheduler(1)
    core.add(entries(job("busy"), job("a"), job("b")), {}, 0)
    # `b` now heads a long chain: it must go before `a`, although `a` came first.
    core.add([Entry(job("long", "b", estimate_s=10_000.0), 10)], {}, 1)
    assert started(finish(core, "busy", 1, 2)) == ["b"]


def test_a_chain_submitted_a_job_at_a_time_raises_its_head_by_the_whole_chain() -> None:
    core = Scheduler(1)
    core.add(entries(job("busy"), job("a", estimate_s=500.0), job("c0", estimate_s=10.0)), {}, 0)
    for i in range(1, 100):  # c0 heads 1,000 s at the end: ahead of a's 500
        core.add([Entry(job(f"c{i}", f"c{i - 1}", estimate_s=10.0), 10 + i)], {}, i)
    assert started(finish(core, "busy", 1, 200)) == ["c0"]


def test_needs_across_submissions_in_the_core_and_settled() -> None:
    core = Scheduler(4)
    assert started(core.add(entries(job("build")), {}, 0)) == ["build"]
    later = core.add(entries(job("test", "build"), start=1), {}, 1)
    assert started(later) == []  # waits for build, which is still in the core
    assert started(finish(core, "build", 1, 5)) == ["test"]

    failed = need_outcome(job("old"), JobResult("old", JobStatus.FAILED, "exit 1", (), "old"))
    out = core.add(
        entries(
            job("deploy", "old"),
            job("report", "old", condition=Condition.ALWAYS),
            job("mop", "old", condition=Condition.FAILURE),
            start=5,
        ),
        {"old": failed},
        6,
    )
    assert completed(out) == {"deploy": (JobStatus.SKIPPED, "needs 'old', which failed")}
    assert sorted(started(out)) == ["mop", "report"]


def test_not_before_waits_for_its_timer() -> None:
    core = Scheduler(2)
    out = core.add(entries(job("night", not_before=100.0)), {}, 0)
    assert started(out) == []
    assert SetTimer(100.0, Wake("night")) in out
    assert started(core.handle(TimerFired(Wake("night")), 99.0)) == []  # early: ignored
    assert started(core.handle(TimerFired(Wake("night")), 100.0)) == ["night"]


def test_cancel_queued_skips_dependents_and_frees_nothing() -> None:
    core = Scheduler(1)
    core.add(
        entries(job("run", priority=Priority.HIGH), job("queued"), job("child", "queued")), {}, 0
    )
    assert core.state("queued") == JobState(Phase.READY)
    out = core.handle(CancelJob("queued", "cancelled by request"), 1)
    assert completed(out) == {
        "queued": (JobStatus.CANCELLED, "cancelled by request"),
        "child": (JobStatus.SKIPPED, "needs 'queued', which was cancelled"),
    }
    assert started(out) == [] and core.attempts_out == 1


def test_cancel_waiting_on_needs() -> None:
    core = Scheduler(1)
    core.add(entries(job("a"), job("b", "a")), {}, 0)
    assert core.state("b") == JobState(Phase.WAITING, needs=("a",))
    out = core.handle(CancelJob("b", "no"), 1)
    assert completed(out) == {"b": (JobStatus.CANCELLED, "no")}
    assert completed(finish(core, "a", 1, 2)) == {"a": (JobStatus.PASSED, "")}


def test_cancel_running_kills_and_never_retries() -> None:
    core = Scheduler(1)
    core.add(entries(job("a", retries=3), job("b")), {}, 0)
    out = core.handle(CancelJob("a", "cancelled by request"), 1)
    assert KillAttempt("a", FailureKind.CANCELLED) in out and not completed(out)
    # The killed process reports a plain failure; the kill's reason wins, and no retry follows.
    out = finish(core, "a", 1, 2, FailureKind.TEST_FAILURE)
    ended = [c for c in out if isinstance(c, AttemptRecorded)]
    assert ended[0].attempt.failure is FailureKind.CANCELLED
    assert completed(out) == {"a": (JobStatus.CANCELLED, "cancelled by request")}
    assert started(out) == ["b"]


def test_a_failure_retries_after_backoff_with_persisted_counters() -> None:
    core = Scheduler(1, backoff=lambda n: 5.0 * n)
    core.add(entries(job("flaky", retries=1)), {}, 0)
    out = finish(core, "flaky", 1, 10, FailureKind.TEST_FAILURE)
    assert Requeued("flaky", 15.0, 1, 0) in out and not completed(out)
    out = core.handle(TimerFired(Wake("flaky")), 15.0)
    assert [c for c in out if isinstance(c, StartAttempt)] == [StartAttempt("flaky", 2, 3600.0)]
    out = finish(core, "flaky", 2, 20, FailureKind.TEST_FAILURE)
    assert completed(out) == {"flaky": (JobStatus.FAILED, "test_failure")}


def test_timeout_timer_kills_the_attempt() -> None:
    core = Scheduler(1)
    core.add(entries(job("slow", timeout_s=30.0)), {}, 0)
    assert core.handle(TimerFired(AttemptTimeout("slow", 1)), 30.0) == []  # not placed yet
    assert core.handle(AttemptPlaced("slow", 1), 5.0) == [SetTimer(35.0, AttemptTimeout("slow", 1))]
    out = core.handle(TimerFired(AttemptTimeout("slow", 1)), 35.0)
    assert out == [KillAttempt("slow", FailureKind.TIMEOUT)]
    out = finish(core, "slow", 1, 31, FailureKind.CANCELLED)
    assert completed(out) == {"slow": (JobStatus.TIMED_OUT, "timed out after 30 s")}


def test_an_attempt_lost_in_a_restart_is_retried_then_given_up() -> None:
    core = Scheduler(1, backoff=lambda n: 0.0)
    entry = Entry(job("j"), 0, attempts=2, infra_used=MAX_INFRA_RETRIES - 1, running=True)
    assert core.add([entry], {}, 0) == [] and core.attempts_out == 1
    out = finish(core, "j", 2, 1, FailureKind.SERVER_LOST)
    assert Requeued("j", 1.0, 0, MAX_INFRA_RETRIES) in out
    out = core.handle(TimerFired(Wake("j")), 1.0)
    assert started(out) == ["j"]
    out = finish(core, "j", 3, 2, FailureKind.SERVER_LOST)
    assert completed(out)["j"][0] is JobStatus.ERROR


def test_hold_starts_nothing_until_its_time() -> None:
    core = Scheduler(2)
    assert core.handle(HoldStarts(50.0), 0) == [SetTimer(50.0, HoldOver())]
    assert started(core.add(entries(job("a")), {}, 1)) == []
    assert started(core.handle(TimerFired(HoldOver()), 50.0)) == ["a"]


def test_a_shorter_hold_does_not_lift_a_longer_one() -> None:
    # The daily spend limit holds until midnight; a backend's "nothing can run" pauses for
    # a minute: that minute ending must not start jobs the spend limit still holds.
    core = Scheduler(2)
    core.handle(HoldStarts(86_400.0), 0)
    core.handle(HoldStarts(60.0), 1)
    assert started(core.add(entries(job("a")), {}, 2)) == []
    assert started(core.handle(TimerFired(HoldOver()), 61.0)) == []
    assert started(core.handle(TimerFired(HoldOver()), 86_400.0)) == ["a"]


def test_a_cancel_while_a_timeout_kill_is_under_way_is_not_retried() -> None:
    # The timeout fired and the kill is under way (a process gets a grace period); the user
    # cancels, is told "cancelling", and the job must not then be retried as a timeout.
    core = Scheduler(1)
    core.add(entries(job("j", retries=2, timeout_s=10.0)), {}, 0)
    core.handle(AttemptPlaced("j", 1), 0)
    assert KillAttempt("j", FailureKind.TIMEOUT) in core.handle(
        TimerFired(AttemptTimeout("j", 1)), 10
    )
    core.handle(CancelJob("j", "cancelled by request"), 11)
    out = finish(core, "j", 1, 12, FailureKind.TEST_FAILURE)
    assert not [c for c in out if isinstance(c, Requeued)]
    assert completed(out)["j"] == (JobStatus.CANCELLED, "cancelled by request")


def test_fail_fast_cancels_matrix_siblings() -> None:
    core = Scheduler(2)
    matrix = {"gpu": "x"}
    jobs = [job(f"t{i}", group="t", matrix=matrix) for i in range(3)]
    core.add(entries(*jobs), {}, 0)
    out = finish(core, "t0", 1, 1, FailureKind.TEST_FAILURE)
    assert KillAttempt("t1", FailureKind.CANCELLED) in out
    assert completed(out)["t2"] == (JobStatus.CANCELLED, "fail-fast: 't0' failed")


@pytest.mark.slow
def test_a_failed_root_settles_a_10000_deep_chain_in_one_call() -> None:
    core = Scheduler(1)
    chain = [job("j0")] + [job(f"j{i}", f"j{i - 1}") for i in range(1, 10_000)]
    core.add(entries(*chain), {}, 0)
    out = finish(core, "j0", 1, 1, FailureKind.TEST_FAILURE)
    assert len(completed(out)) == 10_000 and len(core) == 0


def test_a_need_outcome_is_data_continue_on_error_counting_as_success() -> None:
    lenient = job("x", continue_on_error=True)
    failed = JobResult("x", JobStatus.FAILED, "")
    assert need_outcome(lenient, failed) == NeedOutcome(JobStatus.FAILED, True, "")
    # The taint is the origin on the result, whatever the reason's words say.
    skipped = JobResult("y", JobStatus.SKIPPED, "anything at all", (), "z")
    assert need_outcome(job("y"), skipped).failure_origin == "z"
