"""`clore-run schema` and `validate` agree: generated pipelines, good and bad in every way JSON
Schema can state, are accepted by both or refused by both.

The schema is checked with the `jsonschema` package, what check-jsonschema (and most editors'
tooling) runs; the document is what our YAML reader made of the file, as `validate` sees it.
Generated pipelines stay clear of what JSON Schema cannot say (needs, cycles, expressions, a
matrix's size or ids it makes twice): those are the loader's alone.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runner.cli.schema import pipeline_schema
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline
from runner.spec.yaml_source import parse_yaml


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    """Made once (not a fixture: Hypothesis would print its whole schema with a failure)."""
    schema = pipeline_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _some(good: list[Any], bad: list[Any]) -> st.SearchStrategy[Any]:
    """Mostly good values, sometimes bad ones: a file breaks one rule or a few (about one in
    five generated files is valid, so both verdicts are tried often)."""
    # 7 of 0..19: Hypothesis favours the ends of a range, and the first branch of a one_of
    return st.integers(0, 19).flatmap(lambda i: st.sampled_from(bad if i == 7 else good))


ENV_NAMES = _some(["HOME_DIR", "_X", "A1"], ["1X", "A-B", "A B", ""])
ENV_VALUES = _some(
    ["text", "", 8080, 0, -3, 0.5, True, False, 1.5e300],
    [math.nan, math.inf, -math.inf, "a\0b"],
)
ENV = st.dictionaries(ENV_NAMES, ENV_VALUES, max_size=3)
RUN = _some(["echo hi", "make test\n", " x "], ["", "   ", "\n", "a\0b", None])
IF = _some(
    ["success()", "always()", " failure() ", "${{ always() }}", "${{failure()}}"],
    ["github.ref", "always", "${{ always() ", "success() }}", "${{ matrix.x }}", ""],
)
NOT_BEFORE = _some(
    ["2026-12-01T02:00:00Z", "2026-12-01T02:00:00+02:00", "2026-12-01 02:00:00.5-05:00"],
    ["2026-12-01T02:00:00", "2026-12-01", "tomorrow", "2026-12-01T02:00"],
)
PATHS = _some(
    ["results.xml", "out/*.png", "a/b/c.txt", "..x", "x..", "a/..b"],
    ["/etc/passwd", "../x", "a/../../b", "~/x", "a/.."],
)
ARTIFACTS = st.one_of(PATHS, st.lists(PATHS, max_size=3))
MINUTES = _some([1, 0.5, 0.001, 60], [0, -1, 1e-320, 0.0009, math.nan, math.inf])
MATRIX_VALUES = st.lists(
    _some(["x", "y", 3, True, 2.5], [math.nan, math.inf, None, [1]]), unique_by=repr, max_size=3
)
STRATEGY = st.fixed_dictionaries(
    {"matrix": st.dictionaries(st.sampled_from(["k", "gpu"]), MATRIX_VALUES, min_size=1)},
    optional={
        "fail-fast": st.booleans(),
    },
)
GPU = st.fixed_dictionaries(
    {},
    optional={
        "type": _some(["RTX", "4090"], [4090, ""]),
        "count": _some([1, 2, 16, 2.0], [0, 17, 1.5, math.nan]),
        "min-vram-gb": _some([0, 8, 24.5], [-1, math.nan, math.inf]),
        "max-price": _some([0.5, 2], [0, -1, math.nan, math.inf]),
        "spot": _some([True, False], ["yes", 1]),
    },
)
JOB_KEYS = _some(["build", "test_1", "_x", "Lint"], ["1bad", "a b", "é", "a" * 101, ""])


@st.composite
def _job(draw: st.DrawFn) -> dict[str, Any]:
    job: dict[str, Any] = {}
    for key, values in (
        ("run", RUN),
        ("if", IF),
        ("not-before", NOT_BEFORE),
        ("artifacts", ARTIFACTS),
        ("junit", PATHS),
        ("timeout-minutes", MINUTES),
        ("estimate-minutes", MINUTES),
        ("env", ENV),
        ("strategy", STRATEGY),
        ("gpu", GPU),
    ):
        if draw(st.integers(0, 3)) == 2 or (key == "run" and draw(st.integers(0, 9)) != 7):
            job[key] = draw(values)
    return job


@st.composite
def pipelines(draw: st.DrawFn) -> dict[str, Any]:
    jobs = st.dictionaries(
        JOB_KEYS, _job(), min_size=draw(st.sampled_from([1, 1, 1, 0])), max_size=3
    )
    doc: dict[str, Any] = {"jobs": draw(jobs)}
    if draw(st.booleans()):
        doc["env"] = draw(ENV)
    if draw(st.booleans()):
        defaults = draw(_job())
        defaults.pop("strategy", None)  # not a key of defaults
        doc["defaults"] = defaults
    if draw(st.integers(0, 3)) == 0:
        doc["timeout-minutes"] = draw(MINUTES)
    if draw(st.integers(0, 3)) == 0:
        doc["budget"] = draw(_some([5, 0.25], [0, -1, math.nan, math.inf]))
    if draw(st.integers(0, 3)) == 0:
        doc["concurrency"] = draw(_some([1, 3, 4.0], [0, 1001, 2.5]))
    return doc


def _verdicts(doc: dict[str, Any]) -> tuple[bool, str]:
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    data = parse_yaml(text, "p.yml").data
    by_schema = [e.message for e in validator().iter_errors(data)]
    try:
        parse_pipeline(text, "p.yml", environ={})
        by_validate = []
    except SpecError as exc:
        by_validate = [str(exc)]
    agree = bool(by_schema) == bool(by_validate)
    return agree, f"{text}\nschema: {by_schema[:3]}\nvalidate: {by_validate}"


@pytest.mark.slow
@given(doc=pipelines())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(doc={"jobs": {}})
@example(doc={"jobs": {"a": {"run": "x", "env": {"A": math.nan}}}})
@example(doc={"defaults": {"run": ""}, "jobs": {"a": {"run": "x"}}})
@example(doc={"defaults": {"run": "x"}, "jobs": {"a": {"run": None}}})
def test_the_schema_and_validate_agree(doc: dict[str, Any]) -> None:
    agree, why = _verdicts(doc)
    assert agree, why


@pytest.mark.parametrize(
    ("doc", "valid"),
    [
        ({"jobs": {"a": {"run": "x"}}}, True),
        ({"jobs": {}}, False),
        ({"jobs": {"1a": {"run": "x"}}}, False),
        ({"env": {"A-B": "c"}, "jobs": {"a": {"run": "x"}}}, False),
        ({"jobs": {"a": {"run": "x", "if": "github.ref"}}}, False),
        ({"jobs": {"a": {"run": "x", "strategy": {"matrix": {"k": []}}}}}, False),
        ({"jobs": {"a": {"run": ""}}}, False),
        ({"jobs": {"a": {"run": "x", "not-before": "2026-12-01T02:00:00"}}}, False),
        ({"jobs": {"a": {"run": "x", "artifacts": ["/etc/passwd"]}}}, False),
        ({"env": {"A": math.nan}, "jobs": {"a": {"run": "x"}}}, False),
        ({"env": {"A": math.inf}, "jobs": {"a": {"run": "x"}}}, False),
        ({"jobs": {"a": {"run": "a\0b"}}}, False),
        ({"jobs": {"a": {"run": "x", "timeout-minutes": 1e-320}}}, False),
        ({"defaults": None, "jobs": {"a": {"run": "x"}}}, True),  # `defaults:` left empty
        ({"defaults": None, "jobs": {"a": {}}}, False),
        ({"jobs": {"a": {"run": "x", "strategy": {"matrix": {"k": [False, False]}}}}}, False),
        ({"jobs": {"a": {"run": "x", "strategy": {"matrix": {"include": []}}}}}, False),
        ({"jobs": {"a": {"run": "x", "strategy": {"matrix": {"k": [1], "exclude": [{}]}}}}}, False),
        ({"jobs": {"a": {"run": "x", "strategy": None}}}, True),
        ({"jobs": {"a": {"run": "x", "not-before": "00000000T00Z"}}}, False),
    ],
)
def test_each_rule_of_the_issue_holds_in_both(doc: dict[str, Any], valid: bool) -> None:
    """The cases issue 28 found accepted by the schema (or by both) that `validate` refuses."""
    agree, why = _verdicts(doc)
    assert agree, why
    text = yaml.safe_dump(doc, allow_unicode=True)
    assert validator().is_valid(parse_yaml(text, "p.yml").data) is valid, why
