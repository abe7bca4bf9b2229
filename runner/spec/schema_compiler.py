"""Compile the pipeline models' validators ahead of time into runner/spec/compiled_models.py.

Importing pydantic and building the models' validators took more than half of
`clore-run validate`. A validator is pydantic_core's `SchemaValidator` over a core schema, and
that schema is plain data but for the few objects it names: the models' classes, their
conversion functions and default factories. This module writes each loader model's core schema
and config as Python source, with the classes replaced by runner.spec.records (built without
pydantic) and the functions named in runner.spec.coercions, and a stamp of what it was made
from. runner.spec.checks uses it while the stamp holds, and the models themselves otherwise.

The rules stay the models': the schema is what pydantic made of them, so the same inputs pass,
and fail with the same errors, by either path (tests/spec/test_compiled_checks.py).

After changing runner/spec/models.py, coercions.py or pydantic, run
    python -m runner.spec.schema_compiler
"""

from __future__ import annotations

import pprint
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runner.spec import coercions, models, records
from runner.spec.checks import COMPILED, LOADER_MODELS, KeyTable, stamp

_FACTORIES = {dict: "dict", list: "list"}
_DROPPED = frozenset({"metadata", "serialization"})  # for JSON Schema and dumping only


class _Name:
    """An object in the schema, written as the source expression that names it."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return self.source


def compiled_source() -> str:
    """The text of compiled_models.py for the models and pydantic installed now."""
    schemas = {}
    for name in LOADER_MODELS:
        model: type[BaseModel] = getattr(models, name)
        model.model_rebuild(force=True)
        reduced = model.__pydantic_validator__.__reduce__()  # (class, (schema, config, ...))
        assert isinstance(reduced, tuple)
        schema, config = reduced[1][:2]
        schemas[name] = (_portable(schema, refs={}), config)
    body = pprint.pformat(schemas, width=100, sort_dicts=False)
    keys = pprint.pformat(key_table(), width=100, sort_dicts=False)
    return (
        f'"""Made by runner.spec.schema_compiler: do not edit, run it again."""\n\n'
        "from runner.spec import coercions as _c\n"
        "from runner.spec import records as _r\n\n"
        f"STAMP = {stamp()!r}\n\n"
        f"SCHEMAS = {body}\n\n"
        f"KEYS = {keys}\n"
    )


def write_compiled(target: Path = COMPILED) -> None:
    target.write_text(compiled_source(), encoding="utf-8")


def key_table() -> KeyTable:
    """Each model's keys by their YAML names, and which keys hold another model: the choices
    for "did you mean" after an unknown key."""
    table: KeyTable = {}
    todo: list[type[BaseModel]] = [getattr(models, name) for name in LOADER_MODELS]
    while todo:
        model = todo.pop()
        if model.__name__ in table:
            continue
        keys, inner = [], {}
        for name, info in model.model_fields.items():
            keys.append(info.alias or name)
            sub = _model_in(info.annotation)
            if sub is not None:
                inner.update(dict.fromkeys({name, info.alias or name}, sub.__name__))
                todo.append(sub)
        table[model.__name__] = (keys, inner)
    return dict(sorted(table.items()))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _portable(value: Any, refs: dict[str, str]) -> Any:
    """`value` with every object that is not plain data replaced by the name that makes it."""
    if isinstance(value, dict):
        return {k: _portable(_ref(k, v, refs), refs) for k, v in value.items() if k not in _DROPPED}
    if isinstance(value, list):
        return [_portable(v, refs) for v in value]
    if isinstance(value, tuple):
        return tuple(_portable(v, refs) for v in value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, type) and issubclass(value, BaseModel):
        if not hasattr(records, value.__name__):
            raise TypeError(f"runner.spec.records has no stand-in for {value.__name__}")
        return _Name(f"_r.{value.__name__}")
    if value in _FACTORIES:
        return _Name(_FACTORIES[value])
    if isinstance(value, types.FunctionType):
        name = value.__name__
        if getattr(coercions, name, None) is value:
            return _Name(f"_c.{name}")
    raise TypeError(f"the schema holds {value!r}, which compiled_models.py cannot name")


def _ref(key: str, value: Any, refs: dict[str, str]) -> Any:
    """A model's `ref` carries the id of its class ("…JobSpec:9430…"): written without it, so
    that the file is the same every time it is made."""
    if key in ("ref", "schema_ref") and isinstance(value, str):
        return refs.setdefault(value, value.split(":")[0])
    return value


if __name__ == "__main__":
    write_compiled()
    print(f"wrote {COMPILED}")
