"""`clore-run schema`: the JSON Schema of the pipeline format, for editors."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    app.command()(schema)


def schema() -> None:
    """Print the JSON Schema of the pipeline format (for editors)."""
    from runner.spec.models import PipelineSchema

    document = PipelineSchema.model_json_schema(by_alias=True)
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    typer.echo(json.dumps(document, indent=2))
