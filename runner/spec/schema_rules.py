"""What the loader checks beyond the models' types, said in JSON Schema for the models' schemas.

`clore-run schema` (editors, check-jsonschema) and serve's OpenAPI document (POST /jobs) are the
models' JSON Schemas; the loader refuses more than the types say: an empty `run`, an `if:` outside
its three forms, a time without a zone, a path leaving the job's folder, an env name a shell
cannot export... Each rule here is one of those checks written as JSON Schema, so that a document
the schema accepts is one `validate` accepts too, wherever JSON Schema can say it
(tests/spec/test_schema_agrees.py generates pipelines and holds the two to that). What JSON
Schema cannot say (a need naming an unknown job, a cycle, a matrix's size, expressions that
name nothing) stays the loader's alone.

The functions are the models' `json_schema_extra`: pydantic calls each with the schema it made
of the model, to be changed in place. Keywords that only apply to one type (pattern, minItems,
propertyNames) sit beside the `anyOf` pydantic writes for an optional field, so `null` still
passes them.
"""

from __future__ import annotations

from typing import Any

from runner.spec.limits import MAX_JOB_ID

JOB_ID = r"^[A-Za-z_][A-Za-z0-9_-]*$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A script: something to run, and no NUL (no process can be given one).
RUN = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
_NO_NUL = r"^[^\u0000]*$"
# `if:`, read as written: success(), failure() or always(), bare or as one ${{ }}.
_CONDITION = r"(?:success|failure|always)\(\)"
IF = rf"^\s*(?:{_CONDITION}|\$\{{\{{\s*{_CONDITION}\s*\}}\}})\s*$"
# An ISO-8601 time with its zone (the loader refuses one without). `clore-run schema` lets a
# `${{ }}` expression stand for it (runner/cli/schema.py); serve reads no environment. The usual
# forms, each field in its range; the calendar (no 30 February) is beyond a pattern, and the
# rarer forms Python also reads (20261201T0200Z, week dates) are left out.
_DATE = r"(?:[1-9]\d{3}|0[1-9]\d\d|00[1-9]\d|000[1-9])-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[01]\d|2[0-3])(?::[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?)?"
_ZONE = r"(?:Z|[+-](?:[01]\d|2[0-3])(?::?[0-5]\d)?)"
NOT_BEFORE = rf"^{_DATE}[T ]{_TIME}{_ZONE}$"
# A path the job's folder does not hold: absolute, at a home folder, or going up with `..`.
OUTSIDE = r"^[/~]|(?:^|/)\.\.(?:/|$)"
# The largest finite number, and numbers that are neither NaN nor infinite: NaN passes every
# bound (each comparison with it is false), but not "above 0 or below 0 or 0".
_MAX_FLOAT = 1.7976931348623157e308
_FINITE_ONLY = {"anyOf": [{"not": {"maximum": 0}}, {"not": {"minimum": 0}}, {"const": 0}]}
FINITE = {"type": "number", "minimum": -_MAX_FLOAT, "maximum": _MAX_FLOAT, **_FINITE_ONLY}
SCALAR_VALUE = {
    "anyOf": [{"type": "string", "pattern": _NO_NUL}, {"type": "boolean"}, FINITE],
}


def finite_numbers(schema: dict[str, Any], *_: Any) -> None:
    """Every number a model takes is finite (pydantic refuses .nan and .inf; bounds alone let
    NaN through)."""
    for prop in schema.get("properties", {}).values():
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "number":
                option.update(_FINITE_ONLY)
                option.setdefault("maximum", _MAX_FLOAT)  # infinity is over every bound


def job_rules(schema: dict[str, Any], *_: Any) -> None:
    """A job's keys (a job, `defaults`, POST /jobs' body)."""
    finite_numbers(schema)
    props = schema.get("properties", {})
    _add(props, "run", {"pattern": RUN})
    _add(props, "if", {"pattern": IF})
    _add(props, "not-before", {"pattern": NOT_BEFORE})
    inside = {"not": {"type": "string", "pattern": OUTSIDE}}  # `not` of a pattern alone
    _add(props, "junit", inside)  # would refuse what is no string at all
    _add(props, "artifacts", {**inside, "items": inside})
    env_rules(props)


def env_rules(props: dict[str, Any]) -> None:
    """`env`: names a shell can export; values that are text without NUL, or finite numbers, or
    booleans (the loader turns 1e999 into no string, and .nan into none)."""
    env = props.get("env")
    if env is None:
        return
    env["propertyNames"] = {"pattern": ENV_NAME}
    for option in env.get("anyOf", [env]):
        if option.get("type") == "object":
            option["additionalProperties"] = SCALAR_VALUE


def strategy_rules(schema: dict[str, Any], *_: Any) -> None:
    """`strategy.matrix`: each key a non-empty list of scalars; include/exclude lists of maps."""
    matrix = schema.get("properties", {}).get("matrix")
    if matrix is None:
        return
    scalar = {"anyOf": [{"type": "string"}, {"type": "boolean"}, FINITE]}
    entry = {"type": "object", "additionalProperties": scalar}
    entries = {"type": "array", "items": entry}
    excluded = {**entries, "items": {**entry, "minProperties": 1}}  # {} would exclude them all
    matrix["properties"] = {"include": entries, "exclude": excluded}
    # Values once each: two equal values make the same job id twice. (Values that differ and
    # still make the same id, as "A" and "a" do, are the loader's to find.)
    # Without a key of values, `include` alone makes the combinations: one at least.
    only_lists = {"propertyNames": {"enum": ["include", "exclude"]}}
    matrix["if"] = only_lists
    matrix["then"] = {"required": ["include"], "properties": {"include": {"minItems": 1}}}
    matrix["additionalProperties"] = {
        "type": "array",
        "minItems": 1,
        "uniqueItems": True,
        "items": scalar,
    }


def pipeline_rules(schema: dict[str, Any], *_: Any) -> None:
    """The whole file: at least one job, ids the loader takes, and a script for every job when
    `defaults` gives none."""
    finite_numbers(schema)
    props = schema.get("properties", {})
    env_rules(props)
    jobs = props.get("jobs")
    if jobs is not None:
        jobs["minProperties"] = 1
        jobs["propertyNames"] = {"pattern": JOB_ID, "maxLength": MAX_JOB_ID}
    # A job's own script, unless `defaults` (a mapping) gives one
    runs = {"required": ["run"], "properties": {"run": {"type": "string"}}}
    defaults_run = {
        "properties": {"defaults": {"type": "object", **runs}},
        "required": ["defaults"],
    }
    each_job_runs = {"properties": {"jobs": {"additionalProperties": runs}}}
    schema["if"] = defaults_run
    schema["else"] = each_job_runs


def _add(props: dict[str, Any], key: str, rule: dict[str, Any]) -> None:
    if key in props:
        props[key].update(rule)
