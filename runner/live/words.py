"""Reasons in words: what an attempt's end, a retry or a job's final status means, in one line.

Shared by the live view and the plain lines, so a terminal and a CI log say the same thing.
"""

from __future__ import annotations

import time

from runner.core.model import Attempt, FailureKind, Job, JobResult, JobStatus
from runner.core.retry import MAX_INFRA_RETRIES, RETRY_TABLE
from runner.figures import duration
from runner.outcome import Outcome, outcome, status_words

# A status in words ("timed out"): looked up, as an enum's `.value` is a Python descriptor and
# every job's line needs its word.
STATUS_WORDS = {status: status_words(status.value) for status in JobStatus}


def look(job: Job, result: JobResult) -> Outcome:
    """The job's end as every report words and colours it (runner.outcome)."""
    return outcome(
        result.status.value,
        allowed=job.continue_on_error,
        flaky=len(result.attempts) > 1,
    )


def status_text(job: Job, result: JobResult) -> str:
    """`passed`, `failed`, `timed out`; a failure the job allows reads `failed (allowed)`, a
    pass after a retry `passed (flaky)`."""
    return look(job, result).words


def seconds(value: float) -> str:
    """`6 s`, `1.5 s`, `4m 05s`: a short span as a person says it."""
    if value < 60:
        return f"{value:.1f}".rstrip("0").rstrip(".") + " s"
    return duration(value)


def what_failed(attempt: Attempt) -> str:
    """`attempt 1 failed (exit 3)`, `attempt 2 timed out after 6 s`, `server #88028 lost
    (outbid)`: the first half of a retry line."""
    kind, n = attempt.failure, attempt.number
    if kind is FailureKind.TIMEOUT:
        return f"attempt {n} timed out after {seconds(attempt.duration_s)}"
    if kind is FailureKind.SERVER_LOST:
        server = _server(attempt)
        why = f" ({_short(attempt.message)})" if attempt.message else ""
        return f"server {server} lost{why}" if server else f"attempt {n}: server lost{why}"
    if kind is FailureKind.TEST_FAILURE:
        code = f"exit {attempt.exit_code}" if attempt.exit_code is not None else "killed"
        return f"attempt {n} failed ({code})"
    label = (kind.value if kind else "failed").replace("_", " ")
    why = f": {_short(attempt.message)}" if attempt.message else ""
    return f"attempt {n} {label}{why}"


def retry_line(job: Job, attempt: Attempt, wait_s: float, used: dict[str, int]) -> str:
    """`attempt 1 failed (exit 3); retrying in 2 s (retry 1 of 2)`, or for a server's fault
    `server #88028 lost (outbid); retrying on another in 2 s`."""
    kind = attempt.failure or FailureKind.TEST_FAILURE
    when = f"in {seconds(wait_s)}" if wait_s >= 0.05 else "now"
    if RETRY_TABLE[kind].spends_retries:
        count = f"retry {used.get('retries', 0)} of {job.retries}"
        return f"{what_failed(attempt)}; retrying {when} ({count})"
    count = f"{used.get('infra', 0)} of {MAX_INFRA_RETRIES}"
    return f"{what_failed(attempt)}; retrying on another server {when} ({count})"


def clock_time(at: float) -> str:
    """`02:00 UTC`, or with the date when it is not today."""
    now = time.gmtime()
    then = time.gmtime(at)
    same_day = then[:3] == now[:3]
    return time.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC", then)


def _server(attempt: Attempt) -> str:
    server_id = attempt.facts.get("server_id")
    return f"#{server_id}" if server_id else attempt.server


def _short(message: str, limit: int = 120) -> str:
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_GPU_VENDOR = ("NVIDIA GeForce ", "NVIDIA ")


def short_gpu_names(text: str) -> str:
    """`NVIDIA GeForce RTX 4090 #100706` -> `RTX 4090 #100706`: at 80 columns the vendor's
    words took the room of the model (`NVIDIA GeForce R…`)."""
    for vendor in _GPU_VENDOR:
        text = text.replace(vendor, "")
    return text
