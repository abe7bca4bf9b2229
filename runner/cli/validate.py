"""`clore-run validate PIPELINE ...`: exit 0, or 2 with FILE:LINE:COL errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.root import EXIT_USAGE
from runner.core.model import Pipeline
from runner.errors import CloreRunError


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    pipelines: Annotated[list[Path], typer.Argument(help="Pipeline files to check.")],
) -> None:
    """Check pipeline files: exit 0, or 2 with FILE:LINE:COL errors."""
    from runner.spec.loader import load_pipeline

    failed = False
    for path in pipelines:
        try:
            pipeline = load_pipeline(path)
        except CloreRunError as exc:
            from runner.report.github_actions import annotate_spec_error

            typer.echo(str(exc), err=True)
            annotate_spec_error(exc)
            failed = True
        else:
            show_warnings(pipeline)
            typer.echo(f"{path}: ok ({len(pipeline.jobs)} jobs)")
    if failed:
        raise typer.Exit(EXIT_USAGE)


def show_warnings(pipeline: Pipeline) -> None:
    """A valid file's warnings on stderr (and as annotations in GitHub Actions)."""
    from runner.report.github_actions import annotate_spec_warnings

    for warning in pipeline.warnings:
        typer.echo(str(warning), err=True)
    annotate_spec_warnings(pipeline.warnings)
