"""`summary.json`: the run in numbers, built from a run's record.

Schema 1 (`"schema": 1`; fields are only ever added within a version; absent facts are `null`).
Its fields, with what each means: runner.report.summary_model, from which its JSON Schema,
schemas/summary.schema.json, is generated (tests hold both to it). Times are ISO 8601 UTC
strings, durations seconds, money USD. A few words the model does not say:

    hedges              boots given back because their hedge answered first (or the other way
                        round), and what they cost (in total_cost_usd already); from the
                        attempts' facts
    warnings            problems with job JUnit files, `run`'s notes, an unusable baseline
    comparison          see runner.report.compare
    job.failed_tests    capped at MAX_FAILED_TESTS; scope "job": the job itself failed
    job.log_tail        the last LOG_TAIL_LINES lines of logs/<id>.log, of jobs that did not pass
    attempt.offset_s    its start, seconds after the run's (to the millisecond)
    attempt.setup_s     seconds getting a place (renting, booting) before the script could
                        start, null when it never got one
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from runner import __version__
from runner.core.model import Attempt, Job, JobResult, JobStatus, RunRecord
from runner.outcome import run_exit_code
from runner.redact import text_redactor
from runner.report import facts as F
from runner.report import summary_model as S
from runner.report.junit import JobTests, JUnitReport, allowed_failure, iso, pipeline_jobs
from runner.report.summary_model import SCHEMA_VERSION
from runner.report.text import clip, tail_lines

LOG_TAIL_LINES = 30
MAX_FAILED_TESTS = 50  # per job, so one broken suite cannot flood the summary


def build_summary(
    out_dir: Path,
    record: RunRecord,
    junit: JUnitReport,
    env: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    exit_code: int | None = None,
) -> S.Summary:
    """The summary of a run, without comparison (see `with_comparison`); `notes` join the
    JUnit files' warnings; `exit_code`: what the run exits with, when its end changed it from
    what its status gives (an order left that may be ours, a signal after the jobs ended)."""
    env = os.environ if env is None else env
    tests = {t.job_id: t for t in junit.jobs}
    by_id = pipeline_jobs(record)
    redact = text_redactor()  # the secrets read once for the whole summary
    jobs = [
        _job(out_dir, by_id.get(r.job_id), r, tests.get(r.job_id), record.started_at, redact)
        for r in record.results
    ]
    budget = record.pipeline.budget_usd
    total = record.total_cost_usd
    return S.Summary(
        schema_version=SCHEMA_VERSION,
        tool=S.Tool(name="clore-run", version=__version__),
        pipeline=S.PipelineRef(name=record.pipeline.name, source=record.pipeline.source),
        backend=record.backend,
        run_id=record.run_id,
        status=record.status.value,
        exit_code=run_exit_code(record.status) if exit_code is None else exit_code,
        started_at=iso(record.started_at),
        finished_at=iso(record.finished_at),
        duration_s=_round(max(0.0, record.finished_at - record.started_at), 3),
        total_cost_usd=_round(total, 6),
        hedges=_hedges(record),
        budget_usd=budget,
        budget_used_pct=_round(100.0 * total / budget, 1) if budget else None,
        jobs_by_status=dict(Counter(r.status.value for r in record.results)),
        tests=_test_totals(junit.jobs),
        ci=ci_info(env),
        warnings=[*junit.warnings, *notes],
        comparison=None,
        jobs=jobs,
    )


def _hedges(record: RunRecord) -> S.Hedges:
    """Hedged boots over the run: the losers given back and their cost, from the facts."""
    given_back, cost = 0, 0.0
    for result in record.results:
        for attempt in result.attempts:
            given_back += int(F.to_float(attempt.facts.get("boots_given_back")) or 0)
            cost += F.to_float(attempt.facts.get("hedge_cost_usd")) or 0.0
    return S.Hedges(boots_given_back=given_back, cost_usd=_round(cost, 6))


def ci_info(env: Mapping[str, str]) -> S.Ci | None:
    """Where this run happened, when it ran in GitHub Actions."""
    server, repo, run_id = (
        env.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    )
    if not (server and repo and run_id):
        return None
    return S.Ci(
        server_url=server,
        repository=repo,
        run_id=run_id,
        # Facts the environment does not give are null, as for every unknown fact.
        run_attempt=env.get("GITHUB_RUN_ATTEMPT") or None,
        run_url=f"{server.rstrip('/')}/{repo}/actions/runs/{run_id}",
        ref_name=env.get("GITHUB_REF_NAME") or None,
        sha=env.get("GITHUB_SHA") or None,
        event_name=env.get("GITHUB_EVENT_NAME") or None,
    )


def _job(
    out_dir: Path,
    job: Job | None,
    result: JobResult,
    tests: JobTests | None,
    origin: float,
    redact: Callable[[str], str],
) -> S.Job:
    facts = F.last_facts(result)
    last = result.attempts[-1] if result.attempts else None
    counts = tests.counts if tests else None
    host = cast(S.Host, {k: facts[k] for k in F.HOST_KEYS if facts.get(k)})
    return S.Job(
        id=result.job_id,
        name=job.name if job else result.job_id,
        group=job.group if job and job.group else None,
        status=result.status.value,
        allowed_failure=job is not None and allowed_failure(job, result),
        reason=redact(result.reason),
        attempts=len(result.attempts),
        duration_s=_round(result.duration_s, 3),
        exit_code=result.exit_code,
        cost_usd=_round(result.cost_usd, 6),
        server=result.server or None,
        usd_per_hour=F.usd_per_hour(last) if last else None,
        gpu=F.gpu_label(facts) or None,
        host=host or None,
        location=_location(job),
        tests=S.JobTests(
            total=counts.tests if counts else 0,
            failures=counts.failures if counts else 0,
            errors=counts.errors if counts else 0,
            skipped=counts.skipped if counts else 0,
        ),
        flaky=bool(tests and tests.flaky),
        failed_tests=_failed_tests(tests, redact),
        log_tail=_log_tail(out_dir, result, redact),
        attempt_details=[_attempt(a, origin, redact) for a in result.attempts],
        warm_server=facts.get(F.WARM_SERVER) == "true",
        server_wait_s=_round(_server_wait_s(result), 3),
    )


def _server_wait_s(result: JobResult) -> float:
    """What serve said the job waited for its servers; else (run) its attempts' time getting
    a place."""
    said = [F.to_float(a.facts.get(F.SERVER_WAIT_S)) for a in result.attempts]
    if any(s is not None for s in said):
        return sum(max(0.0, s or 0.0) for s in said)
    return sum(
        max(0.0, a.placed_at - a.started_at) for a in result.attempts if a.placed_at is not None
    )


def _location(job: Job | None) -> S.Location | None:
    loc = job.location if job else None
    if loc is None:
        return None
    return S.Location(file=loc.file, line=loc.line, column=loc.column)


def _failed_tests(tests: JobTests | None, redact: Callable[[str], str]) -> list[S.FailedTest]:
    if tests is None:
        return []
    return [
        S.FailedTest(
            classname=c.classname,
            name=c.name,
            message=clip(redact(c.message), 500),
            kind="error" if c.outcome == "error" else "failure",  # failed: one or the other
            scope="job" if c.job_level else "test",
        )
        for c in tests.failed[:MAX_FAILED_TESTS]
    ]


def _log_tail(out_dir: Path, result: JobResult, redact: Callable[[str], str]) -> list[str]:
    if result.status in (JobStatus.PASSED, JobStatus.SKIPPED, JobStatus.CANCELLED):
        return []
    lines = tail_lines(os.path.join(out_dir, "logs", f"{result.job_id}.log"), LOG_TAIL_LINES)
    return [clip(redact(line), 500) for line in lines]


def _attempt(attempt: Attempt, origin: float, redact: Callable[[str], str]) -> S.Attempt:
    setup = None if attempt.placed_at is None else max(0.0, attempt.placed_at - attempt.started_at)
    return S.Attempt(
        number=attempt.number,
        started_at=iso(attempt.started_at),
        finished_at=iso(attempt.finished_at),
        duration_s=_round(attempt.duration_s, 3),
        exit_code=attempt.exit_code,
        failure=attempt.failure.value if attempt.failure else None,
        message=redact(attempt.message),
        server=attempt.server or None,
        cost_usd=_round(attempt.cost_usd, 6),
        usd_per_hour=F.usd_per_hour(attempt),
        facts=dict(attempt.facts),
        offset_s=_round(attempt.started_at - origin, 3),
        setup_s=None if setup is None else _round(setup, 3),
    )


def _test_totals(jobs: tuple[JobTests, ...]) -> S.RunTests:
    total = failures = errors = skipped = 0
    for t in jobs:
        total += t.counts.tests
        failures += t.counts.failures
        errors += t.counts.errors
        skipped += t.counts.skipped
    return S.RunTests(
        total=total,
        passed=total - failures - errors - skipped,
        failures=failures,
        errors=errors,
        skipped=skipped,
        flaky_jobs=sum(1 for t in jobs if t.flaky),
    )


def _round(value: float, digits: int) -> float:
    return round(value, digits)
