"""summary.json against its published JSON Schema (schemas/summary.schema.json), as check-jsonschema
reads it, and that file held to the model it is generated from; the pipeline examples against
`clore-run schema`, the same way; and the field list the docs print held to the schema, so neither
drifts from what is written."""

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
from pydantic import BaseModel, ValidationError

from runner.cli.schema import pipeline_schema
from runner.report import write_reports
from runner.report.junit import build_junit
from runner.report.summary import SCHEMA_VERSION, build_summary
from runner.report.summary_model import Summary, parse_summary
from runner.report.summary_schema import REGENERATE, schema_text
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    return json.loads(json.dumps(summary.to_json()))  # as a reader gets it


def test_the_published_schema_is_the_one_the_model_makes() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        f"schemas/summary.schema.json is not what the summary model makes: run `{REGENERATE}`"
    )


def _unset_fields(model: BaseModel, where: str = "summary") -> list[str]:
    """Fields of `model` and the models in it that were left to their defaults."""
    unset = [
        f"{where}.{name}" for name in type(model).model_fields if name not in model.model_fields_set
    ]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                unset += _unset_fields(
                    item, f"{where}.{name}" + (f".{i}" if isinstance(value, list) else "")
                )
    return unset


@pytest.mark.slow
@given(_records())
@settings(max_examples=30, deadline=None)
def test_the_builder_says_every_field(record: Any) -> None:
    """The model's defaults are for reading older files: a run's summary sets every field."""
    out = Path("/nonexistent")
    summary = build_summary(out, record, build_junit(out, record), env=CI_ENV)
    assert _unset_fields(summary) == []


def test_a_summary_reads_back_as_written_and_an_older_or_newer_one_reads_too(
    tmp_path: Path,
) -> None:
    write_outputs(tmp_path)
    paths = write_reports(tmp_path, mixed_record(), baseline_summary())
    written = json.loads(paths.summary_json.read_text(encoding="utf-8"))
    assert paths.summary is not None and _unset_fields(paths.summary) == []  # comparison too
    assert parse_summary(written) == paths.summary
    newer = {**written, "surprise": 1, "jobs": [{**written["jobs"][0], "new_fact": "x"}]}
    assert parse_summary(newer).jobs[0] == parse_summary(written).jobs[0]
    older = {k: v for k, v in written.items() if k != "hedges"}
    gone = ("setup_s", "offset_s")  # fields an older summary lacks
    older["jobs"] = [
        {**j, "attempt_details": [{k: v for k, v in a.items() if k not in gone}
                                  for a in j["attempt_details"]]}
        for j in written["jobs"]
    ]  # fmt: skip
    read = parse_summary(older)
    assert read.hedges.boots_given_back == 0
    assert {a.setup_s for j in read.jobs for a in j.attempt_details} == {0.0}  # ran at once
    with pytest.raises(ValidationError, match="surprise"):
        Summary.model_validate(newer)  # building: an unknown field is an error


@pytest.mark.slow
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
