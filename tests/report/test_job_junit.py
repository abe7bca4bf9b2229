"""A job's own JUnit is untrusted: broken, huge or hostile files become warnings, never errors."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

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


def _cases(tmp_path: Path) -> list[ET.Element]:
    return ET.parse(tmp_path / "junit.xml").getroot().findall("testsuite/testcase")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<testsuite><testcase name='a'>", "not usable XML"),
        (BILLION_LAUGHS, "DTD or entity declaration refused"),
        ("<html><body>502 Bad Gateway</body></html>", "is not JUnit"),
        (None, "not found"),
    ],
    ids=["truncated", "billion-laughs", "not-junit", "missing"],
)
def test_bad_job_junit_is_a_warning_and_the_job_still_reports(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    paths = write_reports(tmp_path, _record(tmp_path, content))
    assert len(paths.warnings) == 1 and expected in paths.warnings[0]
    assert "gpu" in paths.warnings[0] and "out/results.xml" in paths.warnings[0]
    # The job falls back to its own single testcase, and the warning reaches summary.md.
    assert [c.get("classname") for c in _cases(tmp_path)] == ["gpu"]
    assert expected in paths.summary_md.read_text()


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
    assert "over 20 MiB; ignored" in paths.warnings[0]
    assert [c.get("classname") for c in _cases(tmp_path)] == ["gpu"]


def test_too_many_testcases_are_capped(tmp_path: Path) -> None:
    n = job_junit.MAX_CASES + 10
    body = "".join(f'<testcase classname="c" name="t{i}"/>' for i in range(n))
    paths = write_reports(tmp_path, _record(tmp_path, f"<testsuite>{body}</testsuite>"))
    assert f"more than {job_junit.MAX_CASES} testcases" in paths.warnings[0]
    cases = _cases(tmp_path)
    assert len(cases) == job_junit.MAX_CASES  # passed job with JUnit: no job-level case
    assert cases[-1].get("name") == f"t{job_junit.MAX_CASES - 1}"


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


def test_a_run_without_job_junit_files_loads_no_xml_parser(tmp_path: Path) -> None:
    """junit.xml is written as text; the parser is for reading a job's own JUnit file."""
    done = run_local_probe(tmp_path, _PARSER_PROBE)
    code, *loaded = done.stderr.split()
    assert (code, loaded) == ("0", []), done.stderr
    assert "<testsuite " in (tmp_path / "out" / "junit.xml").read_text(encoding="utf-8")
