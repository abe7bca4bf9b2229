"""The run's `junit.xml`: a `<testsuite>` per job, valid against the Jenkins/Surefire junit-10 XSD.

Rules:
- A job's suite carries its host facts and cost in `<properties>`.
- The job's own JUnit (`junit:` in the pipeline, at OUT/artifacts/<job>/<junit>) is merged into its
  suite, classnames prefixed with the job id so tests of matrix instances stay apart.
- A job-level testcase (classname = job id, name = job name) stands for the job itself when there
  is no merged JUnit, when the job did not pass (a timeout or a crash after the tests must show),
  or when it needed retries (so the flakiness shows).
- Retries follow Maven Surefire: passed on a later attempt -> `<flakyFailure>`/`<flakyError>` per
  failed attempt; never passed -> `<failure>` (or `<error>`) for the first attempt that failed
  that way and `<rerunFailure>`/`<rerunError>` for each other one. Infrastructure failures are
  errors.
- `<testsuites>` carries tests/failures/errors/time only: junit-10 allows no `skipped` there.

The document is written as text, exactly as ElementTree would write the tree indented by
`ET.indent` (tests hold it to that): building Elements and walking them again took most of
writing the reports, and ElementTree's import is only needed to read a job's own JUnit.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from runner import outcome as job_outcome
from runner.core.model import (
    INFRASTRUCTURE_KINDS,
    Attempt,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    RunRecord,
)
from runner.redact import text_redactor
from runner.report import facts as F
from runner.report.text import clip, escape_text, tail_lines, xml_safe

# A job's own JUnit file, and its parser, load when a job has one (or failed: its Case).
if TYPE_CHECKING:
    from runner.report.job_junit import Case, JobJUnit, Outcome, Rerun

LOG_TAIL_LINES = 200
_FAILED = (JobStatus.FAILED, JobStatus.TIMED_OUT)
_NOT_RUN = (JobStatus.SKIPPED, JobStatus.CANCELLED)
# Child order in Surefire's XSD (3.0), which its readers (Jenkins) follow.
_SUREFIRE_ORDER = ("failure", "rerunFailure", "flakyFailure", "error", "rerunError", "flakyError")
_RESULT_ORDER = ("skipped", *_SUREFIRE_ORDER)
_RERUN_CHILDREN = ("stackTrace", "system-out", "system-err")  # in the XSD's order
# What ET.indent puts before an element at each depth (and before a parent's closing tag).
_INDENT = tuple("\n" + "  " * level for level in range(8))


class Counts(NamedTuple):
    """Test counts of a suite (or of the whole run)."""

    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0


class JobTests(NamedTuple):
    """What the report learned about one job's tests, for the summary too."""

    job_id: str
    counts: Counts
    failed: tuple[Case, ...]  # failed or errored testcases (merged and job-level)
    flaky: bool


class JUnitReport(NamedTuple):
    """The serialised document plus what the summary needs from it."""

    xml: bytes
    jobs: tuple[JobTests, ...]
    warnings: tuple[str, ...]


_DECLARATION = b"<?xml version='1.0' encoding='utf-8'?>\n"


def build_junit(out_dir: Path, record: RunRecord) -> JUnitReport:
    """Render the run as JUnit XML. Bad job JUnit files become warnings."""
    writer = _Writer(out_dir, record)
    suites: list[str] = []
    jobs: list[JobTests] = []
    warnings: list[str] = []
    by_id = pipeline_jobs(record)
    for result in record.results:
        # a result for a job the pipeline does not know (should not happen): still report it
        job = by_id.get(result.job_id) or Job(id=result.job_id, name=result.job_id, run="")
        own = _own_junit(out_dir, job)
        # A job cancelled or skipped before it could write its JUnit file is no file missing.
        if own is not None and (own.found or result.status not in _NOT_RUN):
            warnings.extend(own.warnings)
        suite, tests = writer.suite(job, result, own)
        suites.append(suite)
        jobs.append(tests)
    total = _total(t.counts for t in jobs)
    attrs = _attr("name", xml_safe(record.pipeline.name)) + _counts(total, include_skipped=False)
    attrs += _attr("time", _secs(max(0.0, record.finished_at - record.started_at)))
    text = _parent("testsuites", attrs, suites, 0)
    xml = _DECLARATION + text.encode("utf-8", "xmlcharrefreplace") + b"\n"
    return JUnitReport(xml=xml, jobs=tuple(jobs), warnings=tuple(warnings))


def pipeline_jobs(record: RunRecord) -> dict[str, Job]:
    """Jobs by id, built once: `Pipeline.job` is a linear search, too slow per result at 10k."""
    return {job.id: job for job in record.pipeline.jobs}


def _own_junit(out_dir: Path, job: Job) -> JobJUnit | None:
    """What the job's own JUnit file held, None when it has none."""
    if not job.junit:
        return None
    from runner.report.job_junit import Case, JobJUnit, read_job_junit  # a job with its own file

    label = f"job '{job.id}' ({job.junit})"
    base = (out_dir / "artifacts" / job.id).resolve()
    path = (base / job.junit).resolve()
    if not path.is_relative_to(base):  # `../` or a symlink must not pull other files in
        return JobJUnit(warnings=(f"{label}: JUnit path leaves artifacts/{job.id}/; ignored",))
    own = read_job_junit(path, label)
    if not own.unreadable:
        return own
    # A failing test may have been in what could not be read: the reporters read testcases,
    # not our warnings, so the problem is an errored testcase of its own.
    unread = Case(
        classname="",
        name=f"JUnit report {job.junit}",
        time=0.0,
        outcome="error",
        message=f"the job's JUnit file {own.unreadable}; tests in it may be missing here",
        result_type="unreadable_report",
    )
    return dataclasses.replace(own, cases=(*own.cases, unread))


class _Writer:
    """The suites of one run, with what is the same for all of them worked out once: the
    secrets (read once for the whole document, not per value) and the `<property>` lines,
    most of which (status, attempts, server, GPU) repeat from job to job."""

    def __init__(self, out_dir: Path, record: RunRecord) -> None:
        self.out_dir = out_dir
        self.record = record
        self.redact: Callable[[str], str] = text_redactor()
        self._properties: dict[tuple[str, str], str] = {}

    def suite(self, job: Job, result: JobResult, own: JobJUnit | None) -> tuple[str, JobTests]:
        merged = own.cases if own is not None else ()
        failed = [c for c in merged if c.outcome in ("failure", "error")]
        allowed = allowed_failure(job, result)
        shown = [_allowed_case(c) for c in merged] if allowed else merged
        cases = [_merged_case(job, c) for c in shown]
        flaky = result.status is JobStatus.PASSED and len(result.attempts) > 1
        found = own is not None and own.found
        # name and id are the suite's and the job-level testcase's: made safe once
        names = _attr("name", xml_safe(job.name)), xml_safe(job.id)
        if not found or result.status is not JobStatus.PASSED or flaky:
            cases.append(self.job_case(job, result, names))
            if result.status in (*_FAILED, JobStatus.ERROR):
                failed.append(_job_failure(job, result, self.redact))
        counts = _count(outcome for _, outcome in cases)
        attrs = names[0] + _attr("id", names[1]) + _counts(counts, include_skipped=True)
        start = result.attempts[0].started_at if result.attempts else self.record.started_at
        # numbers and ISO times: nothing in them to escape
        attrs += f' time="{_secs(result.duration_s)}" timestamp="{iso(start)}"'
        if result.server:
            attrs += _attr("hostname", xml_safe(result.server))
        children = [self.properties(job, result, own), *(xml for xml, _ in cases)]
        if own is not None:  # the job's suites' own output, after the testcases as in the XSD
            children += [_leaf(t, "", x) for t, x in _suite_outputs(own) if x]
        return _parent("testsuite", attrs, children, 1), JobTests(
            job.id, counts, tuple(failed), flaky
        )

    def properties(self, job: Job, result: JobResult, own: JobJUnit | None = None) -> str:
        facts = F.last_facts(result)
        pairs = (
            ("clore.job_id", job.id),
            (
                "clore.status",
                job_outcome.outcome(
                    result.status,
                    allowed=allowed_failure(job, result),
                    flaky=len(result.attempts) > 1,
                ).words,
            ),
            ("clore.attempts", str(len(result.attempts))),
            ("clore.cost_usd", f"{result.cost_usd:.4f}"),
            ("clore.server", result.server),
            ("clore.gpu", F.gpu_label(facts)),
            ("clore.server_id", facts.get(F.SERVER_ID, "")),
            ("clore.usd_per_hour", facts.get(F.USD_PER_HOUR, "")),
            ("clore.cuda", facts.get(F.CUDA, "")),
            ("clore.driver", facts.get(F.DRIVER, "")),
            ("clore.host_fingerprint", facts.get(F.HOST_FINGERPRINT, "")),
            ("clore.reason", result.reason),
        )
        seen = self._properties
        lines = []
        for pair in pairs:
            if not pair[1]:  # absent facts stay absent rather than showing as ""
                continue
            line = seen.get(pair)
            if line is None:
                value = xml_safe(clip(self.redact(pair[1]), 2000))
                line = _leaf("property", _attr("name", pair[0]) + _attr("value", value))
                seen[pair] = line
            lines.append(line)
        for name, value in own.properties if own is not None else ():
            # the job's own suites' properties (read redacted and XML-safe), after ours; a name
            # of ours is not taken from a file a job wrote
            if not name.startswith("clore."):
                lines.append(_leaf("property", _attr("name", name) + _attr("value", value)))
        return _parent("properties", "", lines, 2)

    def job_case(self, job: Job, result: JobResult, names: tuple[str, str]) -> tuple[str, Outcome]:
        """The testcase of the job itself; `names`: its name attribute and its safe id."""
        attempts = result.attempts
        duration = attempts[-1].duration_s if attempts else 0.0
        outcome: Outcome = "passed"
        children: list[tuple[str, str]] = []  # (tag, xml)
        if result.status in _NOT_RUN:
            message = xml_safe(self.redact(_reason(result)))
            children.append(("skipped", _leaf("skipped", _attr("message", message))))
            outcome = "skipped"
        elif allowed_failure(job, result):
            # The run passed: a <failure> would turn the reporters' check red (EnricoMi's
            # publish-unit-test-result counts any). Skipped keeps it green and still listed,
            # with what failed in its message and each attempt in its text.
            message = f"{ALLOWED}: {self.redact(_reason(result))}"
            text = "\n".join(_describe(a) for a in attempts)
            attrs = _attr("message", xml_safe(message))
            children.append(("skipped", _leaf("skipped", attrs, xml_safe(text) or None)))
            outcome = "skipped"
        elif result.status is JobStatus.PASSED:
            # flaky: every failed try before the passing one
            children += [self.rerun(attempt, "flaky") for attempt in attempts[:-1]]
        else:
            decisive = _decisive_attempt(result)
            duration = decisive.duration_s if decisive else 0.0  # Surefire: that run's time
            verdict = self.verdict(result, decisive)
            outcome = "error" if verdict[0] == "error" else "failure"
            children.append(verdict)
            children += [self.rerun(a, "rerun") for a in attempts if a is not decisive]
            children.sort(key=lambda child: _SUREFIRE_ORDER.index(child[0]))  # stable: by attempt
        log_tail = self.log_tail(job)
        if log_tail:
            children.append(("system-out", _leaf("system-out", "", xml_safe(log_tail))))
        attrs = f'{names[0]}{_attr("classname", names[1])} time="{_secs(duration)}"'
        return _parent("testcase", attrs, [xml for _, xml in children], 2), outcome

    def verdict(self, result: JobResult, attempt: Attempt | None) -> tuple[str, str]:
        """`<failure>`/`<error>` of a job that never passed, about `attempt`."""
        tag = "error" if result.status is JobStatus.ERROR else "failure"
        message = self.redact((attempt.message if attempt else "") or _reason(result))
        attrs = _attr("message", xml_safe(message)) + _attr("type", _type(attempt, result))
        return tag, _leaf(tag, attrs, xml_safe(_describe(attempt)) if attempt else None)

    def rerun(self, attempt: Attempt, prefix: str) -> tuple[str, str]:
        infra = attempt.failure in INFRASTRUCTURE_KINDS
        tag = f"{prefix}{'Error' if infra else 'Failure'}"
        attrs = _attr("message", xml_safe(self.redact(attempt.message) or _describe(attempt)))
        attrs += _attr("type", attempt.failure.value if attempt.failure else "unknown")
        trace = _leaf("stackTrace", "", xml_safe(_describe(attempt)))
        return tag, _parent(tag, attrs, [trace], 3)

    def log_tail(self, job: Job) -> str:
        path = os.path.join(self.out_dir, "logs", f"{job.id}.log")
        return self.redact("\n".join(tail_lines(path, LOG_TAIL_LINES)))


def _suite_outputs(own: JobJUnit) -> tuple[tuple[str, str], ...]:
    return (("system-out", own.system_out), ("system-err", own.system_err))


ALLOWED = "failed (allowed by continue-on-error)"


def _allowed_case(case: Case) -> Case:
    """A failed test of a job whose failure `continue-on-error` allows: written as skipped
    with what failed, so the passing run's report does not fail the check."""
    if case.outcome not in ("failure", "error"):
        return case
    message = f"{ALLOWED}: {case.message}" if case.message else ALLOWED
    return dataclasses.replace(case, outcome="skipped", message=message)


def allowed_failure(job: Job, result: JobResult) -> bool:
    """`continue-on-error` lets this failure pass: it reads "failed (allowed)" everywhere."""
    bad = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR)
    return job.continue_on_error and result.status in bad


def _merged_case(job: Job, case: Case) -> tuple[str, Outcome]:
    classname = f"{job.id}.{case.classname}" if case.classname else job.id
    attrs = _attr("name", case.name) + _attr("classname", classname)
    attrs += _attr("time", _secs(case.time))
    children: list[tuple[str, str]] = []  # (tag, xml)
    if case.outcome != "passed":
        result = _attr("message", case.message)
        if case.outcome != "skipped":
            result += _attr("type", case.result_type or case.outcome)
        children.append((case.outcome, _leaf(case.outcome, result, case.details or None)))
    children += [(r.tag, _rerun(r)) for r in case.reruns]
    children.sort(key=lambda child: _RESULT_ORDER.index(child[0]))  # stable: as written
    xml = [x for _, x in children]
    if case.system_out:
        xml.append(_leaf("system-out", "", xml_safe(case.system_out)))
    if case.system_err:
        xml.append(_leaf("system-err", "", xml_safe(case.system_err)))
    return _parent("testcase", attrs, xml, 2), case.outcome


def _rerun(rerun: Rerun) -> str:
    """A Surefire retry element of a job's own report, as it wrote it (its texts were made
    XML-safe and redacted when read)."""
    attrs = _attr("message", rerun.message) + _attr("type", rerun.type or "unknown")
    texts = (rerun.stack_trace, rerun.system_out, rerun.system_err)
    children = [
        _leaf(tag, "", text) for tag, text in zip(_RERUN_CHILDREN, texts, strict=True) if text
    ]
    return _parent(rerun.tag, attrs, children, 3)


def _decisive_attempt(result: JobResult) -> Attempt | None:
    """The attempt the `<failure>`/`<error>` of a job that never passed is about: the first one
    that failed the way the job did (infrastructure for `error`, the job itself for `failure`),
    so a test failure after a lost server is not reported as the lost server. Any other attempt
    is a `rerun*` element of its own kind."""
    infra = result.status is JobStatus.ERROR
    for attempt in result.attempts:
        if attempt.failure is not None and (attempt.failure in INFRASTRUCTURE_KINDS) == infra:
            return attempt
    return result.attempts[0] if result.attempts else None


def _type(attempt: Attempt | None, result: JobResult) -> str:
    if attempt and attempt.failure:
        return attempt.failure.value
    return "timeout" if result.status is JobStatus.TIMED_OUT else result.status.value


def _describe(attempt: Attempt) -> str:
    """One line per attempt: what happened, where, and when."""
    what = attempt.failure.value if attempt.failure else "passed"
    if attempt.failure is FailureKind.TEST_FAILURE and attempt.exit_code is not None:
        what = f"exit code {attempt.exit_code}"
    where = f" on {attempt.server}" if attempt.server else ""
    return f"attempt {attempt.number}: {what}{where} after {_secs(attempt.duration_s)} s"


def _reason(result: JobResult) -> str:
    return result.reason or result.status.value


def _job_failure(job: Job, result: JobResult, redact: Callable[[str], str]) -> Case:
    """The job-level testcase as a failed test, for the summary's "failed tests" list."""
    from runner.report.job_junit import Case  # only for a failed job

    outcome: Outcome = "error" if result.status is JobStatus.ERROR else "failure"
    first = result.attempts[0] if result.attempts else None
    message = redact((result.attempts[-1].message if result.attempts else "") or _reason(result))
    return Case(
        classname=job.id,
        name=job.name,
        time=first.duration_s if first else 0.0,
        outcome=outcome,
        message=message,
        job_level=True,
    )


def _count(outcomes: Iterable[Outcome]) -> Counts:
    tests = failures = errors = skipped = 0
    for outcome in outcomes:
        tests += 1
        failures += outcome == "failure"
        errors += outcome == "error"
        skipped += outcome == "skipped"
    return Counts(tests, failures, errors, skipped)


def _total(suites: Iterable[Counts]) -> Counts:
    tests = failures = errors = skipped = 0
    for counts in suites:
        tests += counts.tests
        failures += counts.failures
        errors += counts.errors
        skipped += counts.skipped
    return Counts(tests, failures, errors, skipped)


def _counts(counts: Counts, include_skipped: bool) -> str:
    text = f' tests="{counts.tests}" failures="{counts.failures}" errors="{counts.errors}"'
    return (text + f' skipped="{counts.skipped}"') if include_skipped else text


# -- the XML text, as ET.indent and ET.tostring write it ---------------------------------------


def _attr(name: str, value: str) -> str:
    """` name="value"`: our names are plain, every value passes ElementTree's escapes."""
    return f' {name}="{_escape_attrib(value)}"'


def _leaf(tag: str, attrs: str, text: str | None = None) -> str:
    """An element without children: ET.indent leaves its text as it is."""
    return f"<{tag}{attrs}>{escape_text(text)}</{tag}>" if text else f"<{tag}{attrs} />"


def _parent(tag: str, attrs: str, children: list[str], level: int) -> str:
    """An element at depth `level` holding `children` (each written), indented as ET.indent
    does: each child on a line of its own two spaces deeper, the closing tag back at `level`."""
    if not children:
        return f"<{tag}{attrs} />"
    inner = _INDENT[level + 1]
    return f"<{tag}{attrs}>{inner}{inner.join(children)}{_INDENT[level]}</{tag}>"


def _escape_attrib(text: str) -> str:
    text = escape_text(text)
    if '"' in text:
        text = text.replace('"', "&quot;")
    if "\r" in text:
        text = text.replace("\r", "&#13;")
    if "\n" in text:
        text = text.replace("\n", "&#10;")
    if "\t" in text:
        text = text.replace("\t", "&#09;")
    return text


def _secs(seconds: float) -> str:
    return f"{seconds:.3f}"


_YEAR_10000 = 253_402_300_800  # unix seconds: the first instant ISO 8601's four digits cannot hold


def iso(unix_seconds: float) -> str:
    """ISO 8601 in UTC, to the second, as `datetime.isoformat(timespec="seconds")` writes it.
    Formatted once per second: the reports write three per job, and jobs end in the same few
    seconds. datetime rounds to the microsecond first, so a time within a microsecond of the
    next second (or outside 1970..9999) goes the long way."""
    whole = int(unix_seconds) if 0 <= unix_seconds < _YEAR_10000 else -1
    if whole >= 0 and unix_seconds - whole < 0.999999:
        return _iso_second(whole)

    return datetime.fromtimestamp(unix_seconds, timezone.utc).isoformat(timespec="seconds")


@lru_cache(maxsize=256)
def _iso_second(whole: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(whole))
