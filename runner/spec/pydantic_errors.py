"""pydantic's validation errors -> located, readable Diagnostics."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from runner.backends.registry import pipeline_keys
from runner.spec.diagnostics import Diagnostic, KeyPath, did_you_mean
from runner.spec.yaml_source import Source

_HINTS = {
    "timeout-minutes": "minutes as a positive number, e.g. 30 or 0.5",
    "estimate-minutes": "minutes as a positive number",
    "max-price": "USD per hour for the whole server, e.g. 0.40",
    "not-before": "an ISO-8601 time with zone, e.g. 2026-12-01T02:00:00Z",
    "needs": "a job id or a list of job ids",
    # the backends' own keys (runner.backends.registry) say theirs
    **{k.name: k.hint for level in ("pipeline", "job") for k in pipeline_keys(level) if k.hint},
}


def diagnostics_from(
    exc: ValidationError, model: type[BaseModel], source: Source, prefix: KeyPath
) -> list[Diagnostic]:
    """One Diagnostic per error of validating `model` at `prefix`."""
    out = []
    for err in exc.errors(include_url=False):
        loc: KeyPath = tuple(err["loc"])
        path = (*prefix, *loc)
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            hint = did_you_mean(key, _known_keys(model, loc[:-1]))
            out.append(source.error(path, f"unknown key '{key}'", hint, key=True))
            continue
        if err["type"] == "missing":
            out.append(source.error(path[:-1], f"missing required key '{loc[-1]}'"))
            continue
        # the key the value is at, from the whole path: a part validated on its own (a job's
        # `strategy`) has an empty `loc`
        field_name = next((str(p) for p in reversed(path) if isinstance(p, str)), "")
        message, fix = _message(err), _fix(err, field_name)
        if not fix and err["type"] != "literal_error":  # its message lists the choices once
            fix = _HINTS.get(field_name, "")
        out.append(source.error(path, message, fix))
    return out


# What each type of value looks like written, for a type error with no better fix.
_TYPE_FIXES = {
    "int": "a whole number, e.g. 2",
    "float": "a number, e.g. 1.5",
    "bool": "true or false",
    "list": "a list, e.g. [a, b]",
    "dict": "a mapping: one `key: value` per line, indented, or {key: value}",
}
# Keys whose value is a mapping, with how to write one from what was given.
_MAPPING_FIXES = {
    "gpu": 'gpu: {{type: "{value}"}}',
    "env": "env: {{NAME: value}}",
    "strategy": 'strategy: {{matrix: {{python: ["3.11", "3.12"]}}}}',
    "defaults": "defaults: {{timeout-minutes: 30}}",
}
_MAPPING_TYPES = ("model_type", "dict_type", "model_attributes_type")
_NUMBER_TYPES = ("float_parsing", "float_type", "int_parsing", "int_type")


def _fix(err: Any, key: str) -> str:
    """How to write the value so it passes: the fix a person can copy."""
    kind, value = str(err["type"]), err.get("input")
    if kind in _MAPPING_TYPES:
        written = value if isinstance(value, (str, int, float)) else "4090"
        example = _MAPPING_FIXES.get(key)
        return f"write it as a mapping: {example.format(value=written)}" if example else ""
    if kind in _NUMBER_TYPES and _yaml11_text_number(value):
        return f"write it as {_yaml11_number(str(value))}"
    if kind == "literal_error":  # the message lists the choices; name the nearest one
        return did_you_mean(str(value), [str(c) for c in _choices(err)]) if value else ""
    prefix = kind.split("_", 1)[0]
    if key in _HINTS:
        return ""  # the key's own hint says it; a choice's message lists the choices
    return _TYPE_FIXES.get(prefix, "")


def _yaml11_text_number(value: object) -> bool:
    """`1e308`: a number to a person, text to YAML 1.1 (its floats need a dot and a sign in
    the exponent), so a number field gets a string."""
    if not isinstance(value, str) or "e" not in value.lower():
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def _yaml11_number(text: str) -> str:
    """`1e308` as YAML 1.1 reads a number: `1.0e+308` (or `1000` for `1e3`)."""
    number = float(text)
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    mantissa, _, exponent = text.lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if not exponent.startswith(("+", "-")):
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}"


def _message(err: Any) -> str:
    kind = str(err["type"])
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else "invalid value"
    value = err.get("input")
    if kind in _MAPPING_TYPES:
        msg = "input should be a mapping"  # never the model's class name (`GpuSpec`)
    elif kind == "literal_error":
        choices = ", ".join(str(c) for c in _choices(err))
        msg = f"input should be one of {choices}" if choices else msg
    elif kind in _NUMBER_TYPES and _yaml11_text_number(value):
        number = "number" if kind.startswith("float") else "whole number"
        # YAML 1.1's floats need a dot and a signed exponent: `1e308` is text to it
        return f"input should be a {number}, got {value!r}, which YAML 1.1 reads as text"
    if isinstance(value, (str, int, float, bool)) or value is None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{msg}, got {shown}"
    return f"{msg}, got a {type(value).__name__}"


def _choices(err: Any) -> list[object]:
    """The choices of a `literal_error` (pydantic lists them in `ctx.expected` as text)."""
    expected = str((err.get("ctx") or {}).get("expected", ""))
    return [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",") if c.strip()]


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed at `loc` inside `model`, by their YAML names: the choices for "did you
    mean" after an unknown key."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None or not isinstance(part, str):
            continue  # list indexes and dict keys do not change the model
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        current = None if field is None else _model_in(field.annotation)
    if current is None:
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (alone or in a union with None), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
