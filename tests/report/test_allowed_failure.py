"""A failure `continue-on-error` allows: the run passes, so its reports must pass in the common
reporters (a `<failure>` or `<error>` turns EnricoMi's publish-unit-test-result check red), and
still say what failed."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from runner.core.model import RunRecord, RunStatus
from runner.report import write_reports
from tests.report.records import mixed_record, write_outputs


def _allowing(record: RunRecord, job_id: str) -> RunRecord:
    jobs = tuple(
        dataclasses.replace(j, continue_on_error=True) if j.id == job_id else j
        for j in record.pipeline.jobs
    )
    return dataclasses.replace(
        record, pipeline=dataclasses.replace(record.pipeline, jobs=jobs), status=RunStatus.PASSED
    )


def test_an_allowed_failure_is_skipped_with_what_failed_not_a_failure(tmp_path: Path) -> None:
    write_outputs(tmp_path)  # logs and the job's own pytest report: one failing test
    write_reports(tmp_path, _allowing(mixed_record(), "test-4090"))
    root = ET.parse(tmp_path / "junit.xml").getroot()
    (suite,) = [s for s in root.iter("testsuite") if s.get("id") == "test-4090"]
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    assert suite.find("testcase/failure") is None and suite.find("testcase/error") is None
    skipped = {c.get("name"): c.find("skipped") for c in suite.iter("testcase")}
    own = skipped["test_backward"]
    assert own is not None
    assert own.get("message") == (
        "failed (allowed by continue-on-error): AssertionError: grad is NaN"
    )
    assert "tests/test_model.py:42" in (own.text or "")  # the failure's details stay
    job = skipped["test (RTX 4090)"]
    assert job is not None and job.get("message", "").startswith(
        "failed (allowed by continue-on-error): "
    )
    assert "attempt 1: exit code" in (job.text or "")

    md = (tmp_path / "summary.md").read_text()
    failed, _, allowed = md.partition("### Allowed to fail (continue-on-error)")
    assert "test_backward" in allowed and "test (RTX 4090)" in allowed
    assert "test (RTX 4090)" not in failed.partition("### Failed tests")[2]
    summary = json.loads((tmp_path / "summary.json").read_text())
    (entry,) = [j for j in summary["jobs"] if j["id"] == "test-4090"]
    assert entry["allowed_failure"] and entry["failed_tests"]  # still said, flagged
