"""summary.json against its published JSON Schema (schemas/summary.schema.json), as check-jsonschema
reads it; the pipeline examples against `clore-run schema`, the same way; and the field list the
docs print held to the schema, so neither drifts from what is written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings

from runner.cli.schema import pipeline_schema
from runner.report import write_reports
from runner.report.junit import build_junit
from runner.report.summary import SCHEMA_VERSION, build_summary
from tests.report.records import CI_ENV, baseline_summary, mixed_record, write_outputs
from tests.report.test_junit import _records

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "schemas" / "summary.schema.json"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = sorted((REPO / "examples").glob("*.yml"))


def _check_jsonschema(schema: Path, *documents: Path) -> subprocess.CompletedProcess[str]:
    """The check-jsonschema CLI (formats checked, as it does by default)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--schemafile",
            str(schema),
            *map(str, documents),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_summaries_pass_check_jsonschema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With CI facts and a baseline, and without either: every field and both forms of the
    optional ones."""
    full, bare = tmp_path / "full", tmp_path / "bare"
    for out in (full, bare):
        write_outputs(out)
    bare_summary = write_reports(bare, mixed_record()).summary_json
    for name, value in CI_ENV.items():
        monkeypatch.setenv(name, value)
    full_summary = write_reports(full, mixed_record(), baseline_summary()).summary_json
    done = _check_jsonschema(SCHEMA, full_summary, bare_summary)
    assert done.returncode == 0, done.stdout + done.stderr
    wrong = json.loads(bare_summary.read_text(encoding="utf-8"))
    wrong["started_at"] = "yesterday"  # formats are checked too
    (tmp_path / "wrong.json").write_text(json.dumps(wrong), encoding="utf-8")
    refused = _check_jsonschema(SCHEMA, tmp_path / "wrong.json")
    assert refused.returncode == 1 and "date-time" in refused.stdout, refused.stdout


def test_the_schema_refuses_what_is_not_a_summary(
    validator: jsonschema.Draft202012Validator,
) -> None:
    """It can fail: an unknown field, an empty string for an unknown fact, another version."""
    summary = _summary_of(mixed_record())
    assert validator.is_valid(summary)
    job = summary["jobs"][-1]
    for broken in (
        {**summary, "surprise": 1},
        {**summary, "schema": SCHEMA_VERSION + 1},
        {**summary, "jobs": [{**job, "server": ""}]},
        {**summary, "jobs": [{**job, "host": {}}]},
    ):
        assert not validator.is_valid(broken)


@given(_records())
@settings(max_examples=60, deadline=None)
def test_any_run_makes_a_summary_the_schema_takes(record: Any) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(_summary_of(record))
    ]
    assert errors == []


def _summary_of(record: Any) -> dict[str, Any]:
    out = Path("/nonexistent")
    summary = build_summary(out, record, build_junit(out, record), env={})
    return json.loads(json.dumps(summary))  # as a reader gets it


def test_every_example_pipeline_passes_check_jsonschema(tmp_path: Path) -> None:
    schema = tmp_path / "pipeline.schema.json"
    schema.write_text(json.dumps(pipeline_schema()), encoding="utf-8")
    assert EXAMPLES
    done = _check_jsonschema(schema, *EXAMPLES)
    assert done.returncode == 0, done.stdout + done.stderr


def _field_lists() -> list[tuple[Path, str]]:
    """Each copy of summary.json's field list in the docs: the code block after its heading."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in re.finditer(r"`summary\.json`, schema \d.*?```\n(.*?)```", text, re.S):
            found.append((doc, match.group(1)))
    return found


def _property_names(node: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                names |= set(value)
            names |= _property_names(value)
    elif isinstance(node, list):
        for item in node:
            names |= _property_names(item)
    return names


def test_the_docs_list_the_fields_the_schema_has() -> None:
    lists = _field_lists()
    assert lists, "no summary.json field list found in README.md or docs/"
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    fields = _property_names(schema)
    for doc, block in lists:
        words = set(re.findall(r"[a-z][a-z0-9_]*", block))
        missing = sorted(fields - words)
        assert not missing, f"{doc.name} does not list {missing}"
        # every name a line starts with (the field column) is one the schema has
        named = {
            name.strip()
            for line in block.splitlines()
            if (head := re.match(r"\s*([a-z_][a-z0-9_, ]*?)(?:\s{2,}|$)", line))
            for name in head.group(1).split(",")
            if name.strip()
        }
        unknown = sorted(named - fields)
        assert not unknown, f"{doc.name} lists {unknown}, which summary.json does not have"
