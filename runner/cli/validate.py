"""`clore-run validate PIPELINE ...`: exit 0, or 2 with FILE:LINE:COL errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.boundary import EXIT_USAGE, Echo
from runner.core.model import Pipeline
from runner.errors import CloreRunError
from runner.report.github_actions import annotate_spec_error, annotate_spec_warnings


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    pipelines: Annotated[list[Path], typer.Argument(help="Pipeline files to check.")],
) -> None:
    """Check pipeline files: exit 0, or 2 with FILE:LINE:COL errors."""
    code = validate_files(pipelines, typer.echo)
    if code:
        raise typer.Exit(code)


def validate_files(paths: list[Path], say: Echo) -> int:
    """Check each file: `FILE: ok (N jobs)`, or its FILE:LINE:COL errors. 0, or 2 if any failed."""
    from runner.spec.loader import load_pipeline  # pydantic: only for a command that reads one

    failed = False
    for path in paths:
        try:
            pipeline = load_pipeline(path)
        except CloreRunError as exc:
            say(str(exc), err=True)
            annotate_spec_error(exc)
            failed = True
        else:
            show_warnings(pipeline, say)
            count = len(pipeline.jobs)
            say(f"{path}: ok ({count} job{'s' if count != 1 else ''})")
    return EXIT_USAGE if failed else 0


def show_warnings(pipeline: Pipeline, say: Echo = typer.echo) -> None:
    """A valid file's warnings on stderr (and as annotations in GitHub Actions)."""
    for warning in pipeline.warnings:
        say(str(warning), err=True)
    annotate_spec_warnings(pipeline.warnings)
