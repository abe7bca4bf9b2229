"""A run as a picture's model: per job its attempts, each split into getting a place (renting,
booting, connecting) and running, with how it ended. Pure: attempt records in, a model out;
summary.md's Mermaid chart, timeline.svg and serve's job pages draw from the same model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from runner.report.summary_model import Summary

SpanOutcome = Literal["passed", "failed", "retried", "timed_out", "allowed"]
Phase = Literal["setup", "run"]  # setup: renting, booting, connecting — before the script ran
SETUP_MIN_S = 0.5  # a shorter wait for a place (a local slot) is not worth drawing


class AttemptRecord(NamedTuple):
    """What the timeline needs of one attempt; absolute times in unix seconds."""

    job_id: str
    job_name: str
    number: int
    started_at: float
    finished_at: float
    placed_at: float | None  # None: it never got a place (or the record does not say)
    failure: str | None  # None: passed; else a failure kind ("test_failure", "timeout"...)
    allowed: bool = False  # its job's failure is one continue-on-error lets pass


class Span(NamedTuple):
    """One bar of the timeline: an attempt's setup or its run."""

    job_id: str
    label: str  # "build", "train attempt 2 (timed out)"
    attempt: int
    phase: Phase
    start_s: float  # seconds from the start of the first attempt drawn
    end_s: float
    # retried: failed, and another followed; timed_out and allowed as the job's end reads
    # (runner.outcome), so a picture does not draw a timeout or an allowed failure as "failed".
    outcome: SpanOutcome


class Timeline(NamedTuple):
    """The bars to draw, jobs in the order they first started."""

    origin: float  # unix seconds of start_s == 0
    end_s: float
    jobs: tuple[str, ...]  # job ids in the order they first started
    names: Mapping[str, str]
    spans: tuple[Span, ...]


_NEVER_PLACED = ("provisioning_failed", "unavailable")
_WORDS = {"timeout": "timed out", "test_failure": "failed", "cancelled": "cancelled"}


def build_timeline(records: Iterable[AttemptRecord]) -> Timeline:
    attempts = sorted(records, key=lambda r: (r.started_at, r.job_id, r.number))
    if not attempts:
        return Timeline(0.0, 0.0, (), {}, ())
    origin = attempts[0].started_at
    last: dict[str, int] = {}
    for record in attempts:
        last[record.job_id] = max(last.get(record.job_id, 0), record.number)
    spans: list[Span] = []
    for record in attempts:
        retried = record.number < last[record.job_id]
        spans.extend(_spans(record, origin, retried, last[record.job_id] > 1))
    names = {r.job_id: r.job_name for r in attempts}
    end = max(r.finished_at for r in attempts) - origin
    return Timeline(origin, end, tuple(dict.fromkeys(names)), names, tuple(spans))


def _spans(record: AttemptRecord, origin: float, retried: bool, several: bool) -> list[Span]:
    start, end = record.started_at - origin, max(record.finished_at, record.started_at) - origin
    placed = None if record.placed_at is None else min(end, max(start, record.placed_at - origin))
    outcome = _outcome(record, retried)
    name = f"{record.job_name} attempt {record.number}" if several else record.job_name
    label = name
    if record.failure is not None:
        words = _WORDS.get(record.failure, record.failure.replace("_", " "))
        if retried:
            words += ", retried"
        elif record.allowed:
            words += ", allowed"
        label += f" ({words})"
    out: list[Span] = []
    run_from = start
    if placed is not None and placed - start >= SETUP_MIN_S:
        setup_label = name
        out.append(Span(record.job_id, setup_label, record.number, "setup", start, placed, outcome))
        run_from = placed
    if placed is None and record.failure in _NEVER_PLACED:  # all of it was getting a place
        out.append(Span(record.job_id, label, record.number, "setup", start, end, outcome))
        return out
    out.append(Span(record.job_id, label, record.number, "run", run_from, end, outcome))
    return out


def _outcome(record: AttemptRecord, retried: bool) -> SpanOutcome:
    if record.failure is None:
        return "passed"
    if retried:
        return "retried"
    if record.allowed:
        return "allowed"
    return "timed_out" if record.failure == "timeout" else "failed"


def records_from_summary(summary: Summary) -> list[AttemptRecord]:
    """The attempt records of a summary (summary.json, schema 1)."""
    origin = _unix(summary.started_at) or 0.0
    out: list[AttemptRecord] = []
    for job in summary.jobs:
        for attempt in job.attempt_details:
            if attempt.offset_s is not None:
                began = origin + attempt.offset_s
            else:  # a summary from before offset_s
                began = _unix(attempt.started_at) or origin
            ended = began + attempt.duration_s
            setup = attempt.setup_s  # absent (an older summary): 0, it ran at once
            placed = None if setup is None else began + setup
            out.append(
                AttemptRecord(
                    job.id,
                    job.name or job.id,
                    attempt.number,
                    began,
                    ended,
                    placed,
                    attempt.failure,
                    job.allowed_failure,
                )
            )
    return out


def _unix(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def phases(timeline: Timeline, phase: Phase) -> Sequence[Span]:
    return [s for s in timeline.spans if s.phase == phase]
