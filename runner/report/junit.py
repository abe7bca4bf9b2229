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
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from runner.core.model import (
    INFRASTRUCTURE_KINDS,
    Attempt,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    RunRecord,
)
from runner.report import facts as F
from runner.report.job_junit import Case, JobJUnit, Outcome, read_job_junit
from runner.report.text import clip, escape_text, redact, tail_lines, xml_safe

LOG_TAIL_LINES = 200
_FAILED = (JobStatus.FAILED, JobStatus.TIMED_OUT)
_NOT_RUN = (JobStatus.SKIPPED, JobStatus.CANCELLED)
# Child order in Surefire's XSD (3.0), which its readers (Jenkins) follow.
_SUREFIRE_ORDER = ("failure", "rerunFailure", "flakyFailure", "error", "rerunError", "flakyError")


@dataclass(frozen=True)
class Counts:
    """Test counts of a suite (or of the whole run)."""

    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.tests + other.tests,
            self.failures + other.failures,
            self.errors + other.errors,
            self.skipped + other.skipped,
        )


@dataclass(frozen=True)
class JobTests:
    """What the report learned about one job's tests, for the summary too."""

    job_id: str
    counts: Counts
    failed: tuple[Case, ...]  # failed or errored testcases (merged and job-level)
    flaky: bool


@dataclass(frozen=True)
class JUnitReport:
    """The serialised document plus what the summary needs from it."""

    xml: bytes
    jobs: tuple[JobTests, ...]
    warnings: tuple[str, ...]


_DECLARATION = b"<?xml version='1.0' encoding='utf-8'?>\n"


def build_junit(out_dir: Path, record: RunRecord) -> JUnitReport:
    """Render the run as JUnit XML. Bad job JUnit files become warnings."""
    root = ET.Element("testsuites", name=xml_safe(record.pipeline.name))
    jobs: list[JobTests] = []
    warnings: list[str] = []
    by_id = pipeline_jobs(record)
    for result in record.results:
        # a result for a job the pipeline does not know (should not happen): still report it
        job = by_id.get(result.job_id) or Job(id=result.job_id, name=result.job_id, run="")
        own = _own_junit(out_dir, job)
        warnings.extend(own.warnings)
        suite, tests = _suite(out_dir, record, job, result, own)
        root.append(suite)
        jobs.append(tests)
    total = sum((t.counts for t in jobs), Counts())
    _set_counts(root, total, include_skipped=False)
    root.set("time", _secs(max(0.0, record.finished_at - record.started_at)))
    # What ET.indent and then tostring(encoding="utf-8", xml_declaration=True) write, in one
    # pass to str, encoded once.
    text = serialized(root)
    xml = _DECLARATION + text.encode("utf-8", "xmlcharrefreplace") + b"\n"
    return JUnitReport(xml=xml, jobs=tuple(jobs), warnings=tuple(warnings))


def serialized(root: ET.Element) -> str:
    """`ET.indent(root)` then `ET.tostring(root, encoding="unicode")`, byte for byte, in one
    pass and without mutating the tree: ElementTree's serializer is generic Python (namespace
    scans, a write call per piece) and took a quarter of building junit.xml. Tags and
    attribute names are ours, plain names; every value passes the same escapes."""
    out: list[str] = []
    _element(out, root, 0, root.tail)
    return "".join(out)


def _element(out: list[str], elem: ET.Element, level: int, tail: str | None) -> None:
    tag = elem.tag
    out.append(f"<{tag}")
    for name, value in elem.items():
        out.append(f' {name}="{_escape_attrib(value)}"')
    children = list(elem)
    if children:
        # ET.indent: blank text and tails become a newline and two spaces a level; the last
        # child's tail steps back to this element's level.
        inner = "\n" + "  " * (level + 1)
        text = elem.text if elem.text and elem.text.strip() else inner
        out.append(f">{escape_text(text)}")
        last = len(children) - 1
        for i, child in enumerate(children):
            child_tail = child.tail if child.tail and child.tail.strip() else inner
            if i == last and not child_tail.strip():
                child_tail = "\n" + "  " * level
            _element(out, child, level + 1, child_tail)
        out.append(f"</{tag}>")
    elif elem.text:
        out.append(f">{escape_text(elem.text)}</{tag}>")
    else:
        out.append(" />")
    if tail:
        out.append(escape_text(tail))


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


def pipeline_jobs(record: RunRecord) -> dict[str, Job]:
    """Jobs by id, built once: `Pipeline.job` is a linear search, too slow per result at 10k."""
    return {job.id: job for job in record.pipeline.jobs}


def _own_junit(out_dir: Path, job: Job) -> JobJUnit:
    if not job.junit:
        return JobJUnit()
    label = f"job '{job.id}' ({job.junit})"
    base = (out_dir / "artifacts" / job.id).resolve()
    path = (base / job.junit).resolve()
    if not path.is_relative_to(base):  # `../` or a symlink must not pull other files in
        return JobJUnit(warnings=(f"{label}: JUnit path leaves artifacts/{job.id}/; ignored",))
    return read_job_junit(path, label)


def _suite(
    out_dir: Path, record: RunRecord, job: Job, result: JobResult, own: JobJUnit
) -> tuple[ET.Element, JobTests]:
    suite = ET.Element("testsuite", name=xml_safe(job.name), id=xml_safe(job.id))
    suite.append(_properties(job, result))
    cases = [_merged_case(job, c) for c in own.cases]
    failed = [c for c in own.cases if c.outcome in ("failure", "error")]
    flaky = result.status is JobStatus.PASSED and len(result.attempts) > 1
    if not own.found or result.status is not JobStatus.PASSED or flaky:
        log_tail = _log_tail(out_dir, job)
        cases.append(_job_case(job, result, log_tail))
        if result.status in (*_FAILED, JobStatus.ERROR):
            failed.append(_job_failure(job, result))
    suite.extend(cases)
    counts = _count(cases)
    _set_counts(suite, counts, include_skipped=True)
    suite.set("time", _secs(result.duration_s))
    start = result.attempts[0].started_at if result.attempts else record.started_at
    suite.set("timestamp", iso(start))
    if result.server:
        suite.set("hostname", xml_safe(result.server))
    return suite, JobTests(job.id, counts, tuple(failed), flaky)


def allowed_failure(job: Job, result: JobResult) -> bool:
    """`continue-on-error` lets this failure pass: it reads "failed (allowed)" everywhere."""
    bad = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR)
    return job.continue_on_error and result.status in bad


def _properties(job: Job, result: JobResult) -> ET.Element:
    props = ET.Element("properties")
    facts = F.last_facts(result)
    pairs = [
        ("clore.job_id", job.id),
        (
            "clore.status",
            result.status.value + (" (allowed)" if allowed_failure(job, result) else ""),
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
    ]
    for name, value in pairs:
        if value:  # absent facts stay absent rather than showing as ""
            ET.SubElement(props, "property", name=name, value=xml_safe(clip(redact(value), 2000)))
    return props


def _merged_case(job: Job, case: Case) -> ET.Element:
    classname = f"{job.id}.{case.classname}" if case.classname else job.id
    element = ET.Element("testcase", name=case.name, classname=classname, time=_secs(case.time))
    if case.outcome != "passed":
        result = ET.SubElement(element, case.outcome, message=case.message)
        if case.outcome != "skipped":
            result.set("type", case.result_type or case.outcome)
        result.text = case.details or None
    _add_output(element, case.system_out, case.system_err)
    return element


def _job_case(job: Job, result: JobResult, log_tail: str) -> ET.Element:
    attempts = result.attempts
    duration = attempts[-1].duration_s if attempts else 0.0
    element = ET.Element("testcase", name=xml_safe(job.name), classname=xml_safe(job.id))
    if result.status in _NOT_RUN:
        ET.SubElement(element, "skipped", message=xml_safe(redact(_reason(result))))
    elif result.status is JobStatus.PASSED:
        for attempt in attempts[:-1]:  # flaky: every failed try before the passing one
            element.append(_rerun(attempt, "flaky"))
    else:
        decisive = _decisive_attempt(result)
        duration = decisive.duration_s if decisive else 0.0  # Surefire: that run's time
        children = [_verdict(result, decisive)]
        children += [_rerun(a, "rerun") for a in attempts if a is not decisive]
        children.sort(key=lambda child: _SUREFIRE_ORDER.index(child.tag))  # stable: by attempt
        element.extend(children)
    element.set("time", _secs(duration))
    _add_output(element, log_tail, "")
    return element


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


def _verdict(result: JobResult, attempt: Attempt | None) -> ET.Element:
    """`<failure>`/`<error>` of a job that never passed, about `attempt`."""
    tag = "error" if result.status is JobStatus.ERROR else "failure"
    message = redact((attempt.message if attempt else "") or _reason(result))
    element = ET.Element(tag, message=xml_safe(message), type=_type(attempt, result))
    element.text = xml_safe(_describe(attempt)) if attempt else None
    return element


def _rerun(attempt: Attempt, prefix: str) -> ET.Element:
    infra = attempt.failure in INFRASTRUCTURE_KINDS
    tag = f"{prefix}{'Error' if infra else 'Failure'}"
    element = ET.Element(tag, message=xml_safe(redact(attempt.message) or _describe(attempt)))
    element.set("type", attempt.failure.value if attempt.failure else "unknown")
    ET.SubElement(element, "stackTrace").text = xml_safe(_describe(attempt))
    return element


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


def _add_output(element: ET.Element, out: str, err: str) -> None:
    if out:
        ET.SubElement(element, "system-out").text = xml_safe(out)
    if err:
        ET.SubElement(element, "system-err").text = xml_safe(err)


def _log_tail(out_dir: Path, job: Job) -> str:
    lines = tail_lines(os.path.join(out_dir, "logs", f"{job.id}.log"), LOG_TAIL_LINES)
    return redact("\n".join(lines))


def _job_failure(job: Job, result: JobResult) -> Case:
    """The job-level testcase as a failed test, for the summary's "failed tests" list."""
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


def _count(cases: Iterable[ET.Element]) -> Counts:
    counts = Counts()
    for case in cases:
        counts += Counts(
            tests=1,
            failures=int(case.find("failure") is not None),
            errors=int(case.find("error") is not None),
            skipped=int(case.find("skipped") is not None),
        )
    return counts


def _set_counts(element: ET.Element, counts: Counts, include_skipped: bool) -> None:
    element.set("tests", str(counts.tests))
    element.set("failures", str(counts.failures))
    element.set("errors", str(counts.errors))
    if include_skipped:
        element.set("skipped", str(counts.skipped))


def _secs(seconds: float) -> str:
    return f"{seconds:.3f}"


def iso(unix_seconds: float) -> str:
    """ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(unix_seconds, timezone.utc).isoformat(timespec="seconds")
