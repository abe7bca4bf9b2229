"""The Typer app every command module registers itself on, and the exit codes they use."""

from __future__ import annotations

from typing import Annotated

import typer

from runner import __version__, collector
from runner.cli.boundary import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_USAGE

__all__ = ["EXIT_INFRA", "EXIT_INTERRUPTED", "EXIT_USAGE", "app"]

app = typer.Typer(
    name="clore-run",
    help="Run pipelines of GPU jobs on servers rented from Clore.ai (or locally, for free).",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clore-run {__version__}")
        raise typer.Exit(0)


# The commands that hold the collector off through their start (their work releases it):
# `validate` ends once the files are read, `run` releases it when its jobs begin.
_HOLD_COLLECTOR = frozenset({"validate", "run"})


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """clore-run PIPELINE is short for clore-run run PIPELINE."""
    if ctx.invoked_subcommand not in _HOLD_COLLECTOR:
        collector.startup_over()  # serve, jobs, offers...: the collector as usual
