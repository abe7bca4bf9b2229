"""`clore-run schema`: the JSON Schema of the pipeline format, for editors."""

from __future__ import annotations

import json
from typing import Any

import typer

# A value that is one whole `${{ }}` expression takes the type of what it stands for (a matrix
# value, an environment variable), so `count: "${{ matrix.gpus }}"` is a valid integer once the
# loader substituted it. The schema sees the file before that: it must let such strings through
# wherever a number, a boolean or a fixed word is expected, or it rejects what `validate` accepts.
EXPRESSION = {
    "type": "string",
    "pattern": r"^\$\{\{.*\}\}$",  # one whole expression, as the loader reads it
    "description": "a ${{ }} expression",
}
_NOT_SUBSTITUTED = frozenset({"if", "needs", "strategy"})  # the loader leaves these as written
_KEPT_ON_TOP = ("title", "description", "default")


def register(app: typer.Typer) -> None:
    app.command()(schema)


def schema() -> None:
    """Print the JSON Schema of the pipeline format (for editors)."""
    typer.echo(json.dumps(pipeline_schema(), indent=2))


def pipeline_schema() -> dict[str, Any]:
    from runner.spec.models import PipelineSchema

    document = PipelineSchema.model_json_schema(by_alias=True)
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    _accept_expressions(document["properties"])
    for name, definition in document.get("$defs", {}).items():
        if name != "Strategy":  # its keys are read as written, never substituted
            _accept_expressions(definition.get("properties", {}))
    return document


def _accept_expressions(properties: dict[str, Any]) -> None:
    for key, prop in list(properties.items()):
        if key in _NOT_SUBSTITUTED or not _needs_expression(prop):
            continue
        body = {k: v for k, v in prop.items() if k not in _KEPT_ON_TOP}
        alternatives = body.pop("anyOf") if list(body) == ["anyOf"] else [body]
        top = {k: prop[k] for k in _KEPT_ON_TOP if k in prop}
        properties[key] = {**top, "anyOf": [*alternatives, EXPRESSION]}


def _needs_expression(prop: dict[str, Any]) -> bool:
    """True when the property takes a scalar that a free string would not satisfy."""
    if "pattern" in prop and "anyOf" in prop:  # a string held to a pattern (`not-before`)
        return True
    options = prop.get("anyOf", [prop])
    if any(o.get("type") == "string" and "enum" not in o and "pattern" not in o for o in options):
        return False  # already takes any string
    return any(o.get("type") in ("integer", "number", "boolean") or "enum" in o for o in options)
