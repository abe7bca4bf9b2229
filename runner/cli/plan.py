"""`clore-run plan PIPELINE [--json] [--backend clore]`: order, asks and costs; rents nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from runner.backends.registry import BACKENDS
from runner.cli.root import EXIT_INFRA
from runner.cli.validate import show_warnings
from runner.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command()(plan)


def plan(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    backend: Annotated[
        str,
        typer.Option(
            help="Also what this backend would do today (clore: each job's offer and the cost).",
            metavar="|".join(name for name, spec in BACKENDS.items() if spec.plan),
        ),
    ] = "none",
) -> None:
    """Show the order in waves, each job's ask and the critical path. Rents nothing."""
    from runner.plan import build_plan, render_plan
    from runner.spec.loader import load_pipeline

    loaded = load_pipeline(pipeline)
    show_warnings(loaded)
    result = build_plan(loaded)
    unfit, offers = False, ""
    if backend != "none":
        spec = BACKENDS.get(backend)
        if spec is None or spec.plan is None:
            planning = [name for name, each in BACKENDS.items() if each.plan]
            raise UsageError(
                f"--backend {backend}: plan knows {', '.join(planning)} only",
                f"omit it or use {' or '.join(planning)}",
            )
        offers, unfit = spec.plan(loaded, result)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(render_plan(result))
        if offers:
            typer.echo(offers)
    if unfit:
        raise typer.Exit(EXIT_INFRA)
