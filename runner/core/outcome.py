"""What a settled job means to the jobs that need it, and a run's status: small pure folds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runner.core.events import StopCause
from runner.core.model import Condition, Job, JobResult, JobStatus, RunStatus

BAD = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR, JobStatus.CANCELLED})
WORD = {
    JobStatus.PASSED: "passed",
    JobStatus.FAILED: "failed",
    JobStatus.TIMED_OUT: "timed out",
    JobStatus.ERROR: "hit an infrastructure error",
    JobStatus.CANCELLED: "was cancelled",
    JobStatus.SKIPPED: "was skipped",
}


@dataclass(frozen=True)
class NeedOutcome:
    """A settled job as the jobs that need it see it."""

    status: JobStatus
    succeeded: bool  # passed, or failed under continue-on-error
    failure_origin: str  # see JobResult.failure_origin


def counts_as_failure(job: Job, status: JobStatus) -> bool:
    """Did this job itself fail (continue-on-error forgives it)?"""
    return status in BAD and not job.continue_on_error


def need_outcome(job: Job, result: JobResult) -> NeedOutcome:
    succeeded = result.status is JobStatus.PASSED or (
        job.continue_on_error and result.status in BAD
    )
    if result.failure_origin:
        return NeedOutcome(result.status, succeeded, result.failure_origin)
    # Without a failure above it there are a dozen outcomes in all: one of each is shared
    # (they are immutable) instead of one built per settled job.
    return _CLEAN[result.status, succeeded]


_CLEAN = {(s, ok): NeedOutcome(s, ok, "") for s in JobStatus for ok in (False, True)}
# What a need that passed, with no failure above it, is to its dependents: most needs are this
# one object, so a test of identity tells a job that only such needs have nothing to weigh.
PASSED_CLEAN = _CLEAN[JobStatus.PASSED, True]


def inherited_origin(job: Job, outcomes: Mapping[str, NeedOutcome]) -> str:
    """The first failure above `job`, in the order of its needs ("" when none)."""
    for need in job.needs:
        origin = outcomes[need].failure_origin
        if origin:
            return origin
    return ""


def skip_reason(job: Job, outcomes: Mapping[str, NeedOutcome], origin: str) -> str | None:
    """Why `job` must be skipped by its `if:`, or None when it runs; `origin` is its
    `inherited_origin`. As in GitHub Actions: success() needs every need to have succeeded and
    no ancestor to have failed (a need skipped for any reason skips it too); failure() needs a
    failed ancestor; always() always runs."""
    if job.condition is Condition.SUCCESS:
        for need in job.needs:
            outcome = outcomes[need]
            if not outcome.succeeded:
                return f"needs '{need}', which {WORD[outcome.status]}"
        if origin:
            return f"'{origin}' failed upstream of it"
    elif job.condition is Condition.FAILURE and not origin:
        return "runs on failure(), and nothing it needs failed"
    return None


def ordered(results: Iterable[JobResult], jobs: Iterable[Job]) -> tuple[JobResult, ...]:
    """Results in the jobs' order (jobs not settled are left out)."""
    by_id = {r.job_id: r for r in results}
    return tuple(by_id[j.id] for j in jobs if j.id in by_id)


def run_status(
    results: Iterable[JobResult], jobs: Mapping[str, Job], stop: StopCause | None
) -> RunStatus:
    """A run's outcome: a real test failure outranks an infrastructure error."""
    if stop is StopCause.INTERRUPTED:
        return RunStatus.INTERRUPTED
    counted = [r for r in results if not jobs[r.job_id].continue_on_error]
    if stop is StopCause.TIMED_OUT or any(
        r.status in (JobStatus.FAILED, JobStatus.TIMED_OUT) for r in counted
    ):
        return RunStatus.FAILED
    # An infrastructure stop cancelled jobs that did not pass.
    if stop is StopCause.INFRASTRUCTURE or any(r.status is JobStatus.ERROR for r in counted):
        return RunStatus.ERROR
    return RunStatus.PASSED
