"""junit.xml: structure, Surefire retries, XSD validity, junitparser reading, golden file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import junitparser
import pytest
import xmlschema
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import xunit2

from runner.core.model import (
    Attempt,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    Pipeline,
    RunRecord,
    RunStatus,
)
from runner.report import write_reports
from runner.report.junit import build_junit
from runner.report.text import xml_safe
from tests.report.records import mixed_record, write_outputs

XSD = Path(__file__).parent / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture
def junit_path(tmp_path: Path) -> Path:
    write_outputs(tmp_path)
    return write_reports(tmp_path, mixed_record()).junit


def _suite(root: ET.Element, job_id: str) -> ET.Element:
    suite = root.find(f"testsuite[@id='{job_id}']")
    assert suite is not None, job_id
    return suite


def _job_case(root: ET.Element, job_id: str) -> ET.Element:
    case = _suite(root, job_id).find(f"testcase[@classname='{job_id}']")
    assert case is not None, job_id
    return case


def test_matches_golden(junit_path: Path, golden: Callable[[str, str], None]) -> None:
    golden("mixed.junit.xml", junit_path.read_text(encoding="utf-8"))


def test_valid_against_junit_xsd(junit_path: Path, schema: xmlschema.XMLSchema) -> None:
    schema.validate(str(junit_path))


def test_xsd_is_strict_enough_to_catch_mistakes(schema: xmlschema.XMLSchema) -> None:
    # junit-10 has no `skipped` on <testsuites>: the validation above would catch us adding it.
    assert not schema.is_valid('<testsuites skipped="1"/>')
    assert not schema.is_valid('<testsuites><testsuite name="x"/></testsuites>')


def test_totals_match_the_suites(junit_path: Path) -> None:
    root = ET.parse(junit_path).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 7
    for attr in ("tests", "failures", "errors"):
        assert int(root.get(attr, "-1")) == sum(int(s.get(attr, "0")) for s in suites)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("10", "3", "1")


def test_suite_attributes_and_properties(junit_path: Path) -> None:
    suite = _suite(ET.parse(junit_path).getroot(), "build")
    assert suite.get("name") == "build"
    assert suite.get("hostname") == "gpu-a"
    assert suite.get("timestamp") == "2026-05-28T20:26:40+00:00"
    assert suite.get("time") == "62.000"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["clore.gpu"] == "RTX 4090 x2"
    assert props["clore.server_id"] == "40123"
    assert props["clore.usd_per_hour"] == "0.72"
    assert props["clore.cost_usd"] == "0.0124"
    assert props["clore.cuda"] == "12.4"
    assert props["clore.host_fingerprint"] == "SHA256:q1w2e3r4t5y6"


def test_missing_facts_are_absent_not_empty(junit_path: Path) -> None:
    suite = _suite(ET.parse(junit_path).getroot(), "report")
    names = {p.get("name") for p in suite.iter("property")}
    assert "clore.gpu" not in names and "clore.cuda" not in names
    assert suite.get("hostname") is None  # never ran anywhere


def test_job_junit_is_merged_with_prefixed_classnames(junit_path: Path) -> None:
    suite = _suite(ET.parse(junit_path).getroot(), "test-4090")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {
        ("test-4090.tests.test_model", "test_forward"),
        ("test-4090.tests.test_model", "test_backward"),
        ("test-4090.tests.test_model", "test_fp8"),
        ("test-4090", "test (RTX 4090)"),  # the job failed, so the job itself shows too
    }
    failure = cases[("test-4090.tests.test_model", "test_backward")].find("failure")
    assert failure is not None and failure.get("message") == "AssertionError: grad is NaN"
    skipped = cases[("test-4090.tests.test_model", "test_fp8")].find("skipped")
    assert skipped is not None and skipped.get("message") == "needs Hopper"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")


def test_flaky_job_has_flaky_failure_and_no_failure(junit_path: Path) -> None:
    case = _job_case(ET.parse(junit_path).getroot(), "unit")
    assert case.find("failure") is None and case.find("error") is None
    flaky = case.findall("flakyFailure")
    assert len(flaky) == 1 and flaky[0].get("type") == "test_failure"
    assert case.get("time") == "20.000"  # Surefire: the passing run's time


def test_always_failing_job_has_failure_and_rerun_failures(junit_path: Path) -> None:
    case = _job_case(ET.parse(junit_path).getroot(), "test-4090")
    assert len(case.findall("failure")) == 1
    assert len(case.findall("rerunFailure")) == 1
    assert case.get("time") == "300.000"  # Surefire: the first run's time


def test_infrastructure_failure_is_an_error(junit_path: Path) -> None:
    root = ET.parse(junit_path).getroot()
    case = _job_case(root, "train")
    assert case.find("failure") is None
    error = case.find("error")
    assert error is not None and error.get("type") == "server_lost"
    assert [e.get("type") for e in case.findall("rerunError")] == ["server_lost"]
    timeout = _job_case(root, "bench").find("failure")
    assert timeout is not None and timeout.get("type") == "timeout"


def _mixed_retries(status: JobStatus, kinds: tuple[FailureKind, ...]) -> ET.Element:
    """The job-level testcase of a job whose attempts failed in different ways."""
    t0 = 1_780_000_000.0
    attempts = tuple(
        Attempt(
            n, t0 + 100 * n, t0 + 100 * n + 10 * n, failure=kind, message=f"try {n}: {kind.value}"
        )
        for n, kind in enumerate(kinds, 1)
    )
    job = Job(id="j", name="j", run="true")
    result = JobResult("j", status, attempts[-1].message, attempts)
    record = RunRecord(Pipeline("p", (job,)), (result,), RunStatus.FAILED, t0, t0 + 500)
    case = ET.fromstring(build_junit(Path("/nonexistent"), record).xml).find("testsuite/testcase")
    assert case is not None
    return case


def test_a_test_failure_after_a_lost_server_is_a_failure_about_the_tests() -> None:
    lost, failed = FailureKind.SERVER_LOST, FailureKind.TEST_FAILURE
    case = _mixed_retries(JobStatus.FAILED, (lost, failed, failed))
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "test_failure"
    assert failure.get("message") == "try 2: test_failure"
    assert case.get("time") == "20.000"  # Surefire: the time of the run the verdict is about
    assert [e.get("type") for e in case.findall("rerunError")] == ["server_lost"]
    assert [e.get("type") for e in case.findall("rerunFailure")] == ["test_failure"]
    # Surefire's order: failure*, rerunFailure*, flakyFailure*, skipped?, error?, rerunError*
    assert [c.tag for c in case] == ["failure", "rerunFailure", "rerunError"]


def test_an_infrastructure_error_after_a_test_failure_is_an_error_about_the_server() -> None:
    lost, failed = FailureKind.SERVER_LOST, FailureKind.TEST_FAILURE
    case = _mixed_retries(JobStatus.ERROR, (failed, lost, lost))
    error = case.find("error")
    assert error is not None and error.get("type") == "server_lost"
    assert error.get("message") == "try 2: server_lost"
    assert [e.get("type") for e in case.findall("rerunFailure")] == ["test_failure"]
    assert [c.tag for c in case] == ["rerunFailure", "error", "rerunError"]


def test_skipped_and_cancelled_jobs_are_skipped(junit_path: Path) -> None:
    root = ET.parse(junit_path).getroot()
    for job_id, reason in (
        ("report", "needs 'test-4090', which failed"),
        ("docs", "run cancelled"),
    ):
        skipped = _job_case(root, job_id).find("skipped")
        assert skipped is not None and skipped.get("message") == reason


def test_log_tail_in_system_out_without_illegal_characters(junit_path: Path) -> None:
    root = ET.parse(junit_path).getroot()
    out = _job_case(root, "test-4090").findtext("system-out") or ""
    assert "FAILED tests/test_model.py::test_backward" in out  # ANSI colours gone
    assert "collecting 39" in out
    train = _job_case(root, "train").findtext("system-out") or ""
    assert "epoch 1" in train and "\x01" not in train


def test_read_by_junitparser(junit_path: Path) -> None:
    xml = junitparser.JUnitXml.fromfile(str(junit_path))
    suites = {s.name: s for s in xml}
    assert suites["test (RTX 4090)"].tests == 4
    assert suites["test (RTX 4090)"].failures == 2
    assert suites["train"].errors == 1
    results = {(c.classname, c.name): [type(r).__name__ for r in c.result] for s in xml for c in s}
    assert results[("test-4090.tests.test_model", "test_backward")] == ["Failure"]
    assert results[("train", "train")] == ["Error"]
    assert results[("docs", "docs")] == ["Skipped"]
    assert results[("build", "build")] == []


def test_read_by_junitparser_xunit2_retries(junit_path: Path) -> None:
    xml = xunit2.JUnitXml.fromfile(str(junit_path))
    cases = {c.classname: c for s in xml for c in s}
    assert cases["unit"].is_flaky and not cases["unit"].is_rerun
    assert cases["test-4090"].is_rerun and len(cases["test-4090"].rerun_failures()) == 1
    assert len(cases["train"].rerun_errors()) == 1


def test_xml_safe_drops_exactly_the_characters_xml_forbids() -> None:
    """Every code point at or beside a boundary of XML 1.0's `Char` production is kept or
    dropped as the production says."""

    def allowed(c: int) -> bool:
        return c in (0x9, 0xA, 0xD) or 0x20 <= c <= 0xD7FF or 0xE000 <= c <= 0xFFFD or c >= 0x10000

    edges = {0x0, 0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE, 0x1F, 0x20, 0x7F, 0xD7FF, 0xD800, 0xDFFF}
    edges |= {0xE000, 0xFFFD, 0xFFFE, 0xFFFF, 0x10000, 0x10FFFF}
    for c in sorted(edges | set(range(0x40))):
        assert (xml_safe(chr(c)) == chr(c)) is allowed(c), hex(c)


_NAMES = st.text(alphabet="ab &<>\"'\r\n\t\x01é", max_size=8)
_SERVERS = st.text(alphabet='ab &<>"\n\t\x01', max_size=6)  # in text too: no \r (parsers fold it)


@st.composite
def _attempts(draw: st.DrawFn, number: int) -> Attempt:
    start = draw(st.floats(0, 1e6))
    return Attempt(
        number,
        1_780_000_000.0 + start,
        1_780_000_000.0 + start + draw(st.floats(0, 1e4)),
        exit_code=draw(st.none() | st.integers(-9, 255)),
        failure=draw(st.none() | st.sampled_from(FailureKind)),
        message=draw(_NAMES),
        server=draw(_SERVERS),
        facts=draw(st.dictionaries(st.sampled_from(["gpu", "gpu_count", "cuda"]), _NAMES)),
    )


@st.composite
def _records(draw: st.DrawFn) -> RunRecord:
    jobs, results = [], []
    for i in range(draw(st.integers(0, 4))):
        job = Job(id=f"j{i}", name=draw(_NAMES), run="true", continue_on_error=draw(st.booleans()))
        count = draw(st.integers(0, 3))
        attempts = tuple(draw(_attempts(n)) for n in range(1, count + 1))
        status = draw(st.sampled_from(JobStatus))
        jobs.append(job)
        results.append(JobResult(job.id, status, draw(_NAMES), attempts))
    pipeline = Pipeline(draw(_NAMES), tuple(jobs))
    return RunRecord(pipeline, tuple(results), RunStatus.FAILED, 1_780_000_000.0, 1_780_000_500.0)


@pytest.mark.slow
@given(_records())
@settings(max_examples=300, deadline=None)
def test_written_as_elementtree_indents_and_writes_it(record: RunRecord) -> None:
    """junit.xml is written as text; byte for byte what ElementTree writes for its tree."""
    xml = build_junit(Path("/nonexistent"), record).xml
    declaration, text = xml.decode("utf-8").split("\n", 1)
    assert declaration == "<?xml version='1.0' encoding='utf-8'?>"
    root = ET.fromstring(xml)
    ET.indent(root)
    assert text == ET.tostring(root, encoding="unicode") + "\n"
