"""schemas/summary.schema.json, the published JSON Schema of summary.json, made from the model
(runner.report.summary_model). A test holds the committed file to it; after changing the model:

    python -m runner.report.summary_schema > schemas/summary.schema.json

The schema says what a run writes (pydantic's "serialization" mode: every field is there, the
model's defaults being only for reading older files), in the published file's words: no titles
or defaults, a nullable type as `["string", "null"]`, definitions named in snake case.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from runner.report.summary_model import Summary

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REGENERATE = "python -m runner.report.summary_schema > schemas/summary.schema.json"


class _Published(GenerateJsonSchema):
    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,
    ) -> bool:
        if field["type"] == "typed-dict-field":  # host: only the facts that are known
            return bool(field.get("required", total))
        return True  # written always; the defaults are for reading older files

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        kind = inner.get("type")
        if not isinstance(kind, str) or "$ref" in inner:
            return super().nullable_schema(schema)
        out = {**inner, "type": [kind, "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out

    def normalize_name(self, name: str) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", super().normalize_name(name)).lower()

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value  # in the order the model says it


def summary_schema() -> dict[str, Any]:
    schema = Summary.model_json_schema(mode="serialization", schema_generator=_Published)
    _tidy(schema)
    schema["title"] = Summary.model_config.get("title")
    head = ("$schema", "title", "description", "type", "properties", "required")
    return {"$schema": DRAFT, **{k: schema[k] for k in head[1:] if k in schema}, **schema}


def _tidy(node: Any, names: bool = False) -> None:
    """Take out pydantic's titles (a field's name said again) and a docstring's line breaks;
    `names`: the keys of `node` are names (of properties, of definitions), not keywords."""
    if isinstance(node, dict):
        if not names:
            node.pop("title", None)
            if isinstance(node.get("description"), str):
                node["description"] = " ".join(node["description"].split())
        for key, value in node.items():
            _tidy(value, key in ("properties", "$defs") and not names)
    elif isinstance(node, list):
        for item in node:
            _tidy(item)


def schema_text() -> str:
    return json.dumps(summary_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
