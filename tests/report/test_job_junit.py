"""A job's own JUnit is untrusted: broken, huge or hostile files become warnings and an errored
testcase, never an exception, and what a readable one says survives the merge."""

from __future__ import annotations

import json
import textwrap
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import pytest
import xmlschema

from runner.core.model import Job, JobResult, JobStatus, Pipeline, RunRecord, RunStatus
from runner.report import job_junit, write_reports
from runner.report.job_junit import read_job_junit
from tests.cli.test_validate_and_run import run_local_probe

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<testsuite name="x" tests="1"><testcase classname="a" name="&lol3;"/></testsuite>
"""


def _record(tmp_path: Path, junit_text: str | bytes | None) -> RunRecord:
    job = Job(id="gpu", name="gpu", run="pytest", junit="out/results.xml")
    if junit_text is not None:
        path = tmp_path / "artifacts" / "gpu" / "out" / "results.xml"
        path.parent.mkdir(parents=True)
        data = junit_text.encode() if isinstance(junit_text, str) else junit_text
        path.write_bytes(data)
    pipeline = Pipeline(name="p", jobs=(job,))
    result = JobResult("gpu", JobStatus.PASSED)
    return RunRecord(pipeline, (result,), RunStatus.PASSED, 0.0, 1.0)


@pytest.fixture(scope="module")
def xsd() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(Path(__file__).parent / "junit-10.xsd"))


def _cases(tmp_path: Path) -> list[ET.Element]:
    return ET.parse(tmp_path / "junit.xml").getroot().findall("testsuite/testcase")


def _errored_report(tmp_path: Path) -> ET.Element:
    """The testcase that stands for an unreadable report."""
    found = [c for c in _cases(tmp_path) if c.get("name") == "JUnit report out/results.xml"]
    assert len(found) == 1, [c.get("name") for c in _cases(tmp_path)]
    return found[0]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<testsuite><testcase name='a'>", "not usable XML"),
        (BILLION_LAUGHS, "DTD or entity declaration refused"),
        ("<html><body>502 Bad Gateway</body></html>", "is not JUnit"),
    ],
    ids=["truncated", "billion-laughs", "not-junit"],
)
def test_an_unreadable_job_junit_is_an_errored_test_where_reporters_look(
    tmp_path: Path, content: str, expected: str, xsd: xmlschema.XMLSchema
) -> None:
    """A failing test may have been in it: the job must not read as all green."""
    paths = write_reports(tmp_path, _record(tmp_path, content))
    assert len(paths.warnings) == 1 and expected in paths.warnings[0]
    assert "gpu" in paths.warnings[0] and "out/results.xml" in paths.warnings[0]
    error = _errored_report(tmp_path).find("error")
    assert error is not None and error.get("type") == "unreadable_report"
    assert expected in (error.get("message") or "")
    xsd.validate(str(paths.junit))
    parsed = junitparser.JUnitXml.fromfile(str(paths.junit))
    assert sum(suite.errors for suite in parsed) == 1
    summary = json.loads(paths.summary_json.read_text())
    assert summary["tests"]["errors"] == 1
    assert "JUnit report out/results" in paths.summary_md.read_text()  # (escaped for Markdown)


def test_a_missing_job_junit_is_a_warning_and_the_job_reports_itself(tmp_path: Path) -> None:
    paths = write_reports(tmp_path, _record(tmp_path, None))
    assert len(paths.warnings) == 1 and "not found" in paths.warnings[0]
    assert [c.get("classname") for c in _cases(tmp_path)] == ["gpu"]
    assert "not found" in paths.summary_md.read_text()


def test_testcases_before_a_break_are_kept(tmp_path: Path) -> None:
    doc = (
        "<testsuite><testcase classname='m' name='ok'/>"
        "<testcase classname='m' name='bad'><failure message='x'>a<b>c</b>d</failure></testcase>"
        "<testcase name='cut'"
    )
    paths = write_reports(tmp_path, _record(tmp_path, doc))
    assert "the 2 testcases before it are kept" in paths.warnings[0]
    names = [c.get("name") for c in _cases(tmp_path)]
    assert names == ["ok", "bad", "JUnit report out/results.xml"]
    failure = _cases(tmp_path)[1].find("failure")
    assert failure is not None and failure.text == "acd"  # text of children too, as itertext


def test_entities_are_refused_in_any_encoding(tmp_path: Path) -> None:
    # The byte scan cannot see "<!ENTITY" in UTF-16: expat's DTD handler must refuse it.
    path = tmp_path / "results.xml"
    path.write_bytes(
        BILLION_LAUGHS.replace('"1.0"?>', '"1.0" encoding="utf-16"?>').encode("utf-16")
    )
    parsed = read_job_junit(path, "job")
    assert not parsed.found and parsed.cases == ()
    assert "refused" in parsed.warnings[0]


def test_external_entity_is_not_fetched(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    doc = (
        f'<!DOCTYPE t [<!ENTITY x SYSTEM "file://{secret}">]>'
        '<testsuite name="s" tests="1"><testcase name="&x;"/></testsuite>'
    )
    paths = write_reports(tmp_path, _record(tmp_path, doc))
    assert "refused" in paths.warnings[0]
    assert "TOP-SECRET" not in paths.junit.read_text()


def test_oversized_file_is_not_read(tmp_path: Path) -> None:
    record = _record(tmp_path, "")
    path = tmp_path / "artifacts" / "gpu" / "out" / "results.xml"
    with path.open("r+b") as fh:  # sparse: "huge" without writing 20 MB
        fh.truncate(job_junit.MAX_BYTES + 1)
    paths = write_reports(tmp_path, record)
    assert "over 20 MiB, and was not read" in paths.warnings[0]
    assert [c.get("classname") for c in _cases(tmp_path)] == ["gpu", "gpu"]  # + the job itself
    assert _errored_report(tmp_path).find("error") is not None


def test_a_20_mib_deeply_nested_file_is_refused_at_once_in_little_memory(tmp_path: Path) -> None:
    """The whole tree of this file took 855 MB and 5 s; read as a stream, the depth cap stops
    it at the 65th element."""
    half = (job_junit.MAX_BYTES - 40) // 7
    doc = b"<testsuite name='x'>" + b"<a>" * half + b"</a>" * half + b"</testsuite>"
    path = tmp_path / "deep.xml"
    path.write_bytes(doc)
    del doc
    tracemalloc.start()
    try:
        parsed = read_job_junit(path, "job")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "deeper than 64" in parsed.unreadable
    assert peak < 2 * 1024 * 1024, peak


@pytest.mark.slow
def test_a_flat_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """Memory follows what is kept, not the number of elements read."""
    path = tmp_path / "flat.xml"
    path.write_bytes(b"<testsuite name='x'>" + b"<x/>" * 200_000 + b"</testsuite>")
    tracemalloc.start()
    try:
        parsed = read_job_junit(path, "job")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parsed.found and parsed.cases == () and not parsed.unreadable
    assert peak < 2 * 1024 * 1024, peak


def test_too_many_testcases_are_capped_and_failures_past_the_cap_still_fail(
    tmp_path: Path,
) -> None:
    n = job_junit.MAX_CASES + 10
    body = "".join(f'<testcase classname="c" name="t{i}"/>' for i in range(n - 1))
    body += '<testcase classname="c" name="last"><failure message="late"/></testcase>'
    paths = write_reports(tmp_path, _record(tmp_path, f"<testsuite>{body}</testsuite>"))
    assert f"more than {job_junit.MAX_CASES} testcases" in paths.warnings[0]
    cases = _cases(tmp_path)
    assert len(cases) == job_junit.MAX_CASES + 1  # passed job with JUnit: no job-level case
    assert cases[-2].get("name") == f"t{job_junit.MAX_CASES - 1}"
    assert cases[-1].get("name") == "10 more testcases (not listed)"
    failure = cases[-1].find("failure")
    assert failure is not None and "1 failure" in (failure.get("message") or "")


def test_what_a_job_report_says_is_kept(tmp_path: Path, xsd: xmlschema.XMLSchema) -> None:
    """Surefire's reruns, the suites' properties and output survive the merge."""
    doc = """<testsuites><testsuite name="s">
      <properties><property name="python" value="3.12"/><property name="clore.status"
        value="spoofed"/></properties>
      <testcase classname="m" name="flaky">
        <flakyFailure message="first try" type="AssertionError"><stackTrace>tb1</stackTrace>
          <system-out>out1</system-out></flakyFailure>
        <flakyError message="second try" type="OSError"/>
      </testcase>
      <testcase classname="m" name="broken">
        <failure message="always" type="AssertionError">tb</failure>
        <rerunFailure message="again" type="AssertionError"><system-err>e2</system-err>
        </rerunFailure>
      </testcase>
      <system-out>suite says hi</system-out><system-err>suite warns</system-err>
    </testsuite></testsuites>"""
    paths = write_reports(tmp_path, _record(tmp_path, doc))
    assert paths.warnings == ()
    xsd.validate(str(paths.junit))
    suite = ET.parse(paths.junit).getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["python"] == "3.12" and props["clore.status"] == "passed"
    flaky, broken = _cases(tmp_path)
    assert [(c.tag, c.get("message"), c.get("type")) for c in flaky] == [
        ("flakyFailure", "first try", "AssertionError"),
        ("flakyError", "second try", "OSError"),
    ]
    assert [(c.tag, c.text) for c in flaky[0]] == [("stackTrace", "tb1"), ("system-out", "out1")]
    assert [c.tag for c in broken] == ["failure", "rerunFailure"]
    assert broken[1].findtext("system-err") == "e2"
    assert suite.findtext("system-out") == "suite says hi"
    assert suite.findtext("system-err") == "suite warns"
    parsed = junitparser.JUnitXml.fromfile(str(paths.junit))
    assert sum(s.failures for s in parsed) == 1


def test_nested_suites_and_odd_times_are_normalised(tmp_path: Path) -> None:
    doc = (
        "<testsuites><testsuite name='outer'><testsuite name='inner'>"
        "<testcase classname='m' name='t1' time='1,234.5'>"
        "<error message='boom' type='RuntimeError'>trace</error></testcase>"
        "<testcase name='no class' time='nan'/>"
        "</testsuite></testsuite></testsuites>"
    )
    paths = write_reports(tmp_path, _record(tmp_path, doc))
    assert paths.warnings == ()
    cases = _cases(tmp_path)
    assert [(c.get("classname"), c.get("name"), c.get("time")) for c in cases] == [
        ("gpu.m", "t1", "1234.500"),
        ("gpu", "no class", "0.000"),
    ]
    error = cases[0].find("error")
    assert error is not None and error.get("type") == "RuntimeError"


@pytest.mark.parametrize("junit", ["../../../secret.xml", "link.xml"])
def test_junit_path_cannot_leave_the_job_artifacts(tmp_path: Path, junit: str) -> None:
    outside = tmp_path / "secret.xml"
    outside.write_text('<testsuite><testcase classname="stolen" name="x"/></testsuite>')
    artifacts = tmp_path / "artifacts" / "gpu"
    artifacts.mkdir(parents=True)
    (artifacts / "link.xml").symlink_to(outside)
    job = Job(id="gpu", name="gpu", run="pytest", junit=junit)
    result = JobResult("gpu", JobStatus.PASSED)
    record = RunRecord(Pipeline(name="p", jobs=(job,)), (result,), RunStatus.PASSED, 0.0, 1.0)
    paths = write_reports(tmp_path, record)
    assert "leaves artifacts/gpu/" in paths.warnings[0]
    assert "stolen" not in paths.junit.read_text()


_PARSER_PROBE = textwrap.dedent(
    """
    import sys
    from runner.launch import main
    try:
        main()
    except SystemExit as exit:
        parser = ("xml.etree.ElementTree", "xml.parsers.expat", "runner.report.job_junit")
        print(exit.code, *sorted(m for m in parser if m in sys.modules), file=sys.stderr)
    """
)


@pytest.mark.slow
def test_a_run_without_job_junit_files_loads_no_xml_parser(tmp_path: Path) -> None:
    """junit.xml is written as text; the parser is for reading a job's own JUnit file."""
    done = run_local_probe(tmp_path, _PARSER_PROBE)
    code, *loaded = done.stderr.split()
    assert (code, loaded) == ("0", []), done.stderr
    assert "<testsuite " in (tmp_path / "out" / "junit.xml").read_text(encoding="utf-8")
