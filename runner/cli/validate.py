"""`clore-run validate PIPELINE ...`: exit 0, or 2 with FILE:LINE:COL errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli import quick
from runner.core.model import Pipeline


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    pipelines: Annotated[list[Path], typer.Argument(help="Pipeline files to check.")],
) -> None:
    """Check pipeline files: exit 0, or 2 with FILE:LINE:COL errors."""
    code = quick.validate_files(pipelines, typer.echo)
    if code:
        raise typer.Exit(code)


def show_warnings(pipeline: Pipeline) -> None:
    """A valid file's warnings on stderr (and as annotations in GitHub Actions)."""
    quick.show_warnings(pipeline, typer.echo)
