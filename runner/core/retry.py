"""What happens after a failed attempt: a table from failure kind to decision, not branches.

Test failures and timeouts spend the job's own `retries`. Infrastructure failures (a server lost,
SSH or provisioning failing) are not the job's fault: they retry on another server against a
separate bound and never count as test failures.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.model import FailureKind, JobStatus


@dataclass(frozen=True)
class RetryRule:
    """What an attempt's failure kind means for the job: another attempt or its final status."""

    retry: bool  # may another attempt follow?
    spends_retries: bool  # does it use up the job's `retries`? (else the infrastructure bound)
    final_status: JobStatus  # the job's status when no attempt follows


RETRY_TABLE: dict[FailureKind, RetryRule] = {
    FailureKind.TEST_FAILURE: RetryRule(True, True, JobStatus.FAILED),
    FailureKind.TIMEOUT: RetryRule(True, True, JobStatus.TIMED_OUT),
    FailureKind.SERVER_LOST: RetryRule(True, False, JobStatus.ERROR),
    FailureKind.SSH_FAILED: RetryRule(True, False, JobStatus.ERROR),
    FailureKind.PROVISIONING_FAILED: RetryRule(True, False, JobStatus.ERROR),
    FailureKind.UNAVAILABLE: RetryRule(False, False, JobStatus.ERROR),
    FailureKind.CANCELLED: RetryRule(False, True, JobStatus.CANCELLED),
}

MAX_INFRA_RETRIES = 3
BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 60.0


def backoff_s(failures_so_far: int) -> float:
    """Wait before the next attempt: 2 s, 4 s, 8 s ... capped at a minute."""
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, failures_so_far - 1)))


def should_retry(
    kind: FailureKind, retries_used: int, retries_allowed: int, infra_used: int
) -> bool:
    rule = RETRY_TABLE[kind]
    if not rule.retry:
        return False
    if rule.spends_retries:
        return retries_used < retries_allowed
    return infra_used < MAX_INFRA_RETRIES
