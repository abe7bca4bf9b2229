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
    "priority": "one of low, normal, high, urgent",
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
        message = _message(err)
        field_name = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        out.append(source.error(path, message, _HINTS.get(field_name, "")))
    return out


def _message(err: Any) -> str:
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else "invalid value"
    value = err.get("input")
    if isinstance(value, (str, int, float, bool)) or value is None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{msg}, got {shown}"
    return f"{msg}, got a {type(value).__name__}"


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
