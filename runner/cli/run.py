"""`clore-run run PIPELINE [options]` (or `clore-run PIPELINE`): flags in, one run, an exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.options import (
    BACKEND_NAMES,
    CoordinatorOption,
    IdentityOption,
    LedgerOption,
    PoolOption,
    backend_help,
    usd_option,
)
from runner.cli.run_flags import RunFlags, run_with
from runner.outcome import exit_codes_help


def register(app: typer.Typer) -> None:
    # The exit codes in runner.outcome's words, as the run's last line and summary.md say them.
    app.command(help=f"Run a pipeline. Exits {exit_codes_help()}.")(run)


def run(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    backend: Annotated[
        str | None,
        typer.Option(
            help=backend_help("clore when CLORE_API_KEY is set, else local"),
            metavar=BACKEND_NAMES,
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for reports, logs and artifacts.")] = Path(
        "clore-run-results"
    ),
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Override the pipeline's concurrency: 1 to 1000 servers (or jobs) at once."
        ),
    ] = None,
    budget: Annotated[
        float | None,
        usd_option(help="Override the budget: USD for the whole run, a positive amount (2.50)."),
    ] = None,
    job: Annotated[
        list[str] | None, typer.Option("--job", help="Run these jobs and what they need.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Show the plan; run and rent nothing.")] = False,
    baseline: Annotated[
        Path | None, typer.Option(help="A previous summary.json to compare cost and time with.")
    ] = None,
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--ssh-host",
            "--host",  # run's first name for it; serve's --host is where it listens
            help="--backend ssh: USER@HOST[:PORT] (repeat for more hosts).",
            metavar="USER@HOST[:PORT]",
        ),
    ] = None,
    identity: IdentityOption = None,
    ledger: LedgerOption = None,
    pool: PoolOption = None,
    coordinator: CoordinatorOption = None,
) -> None:
    """Run a pipeline (its help, with the exit codes, is given where it is registered)."""
    flags = RunFlags(
        pipeline,
        backend,
        out,
        concurrency,
        budget,
        job or [],
        dry_run,
        baseline,
        host or [],
        identity,
        ledger,
        pool,
        coordinator,
    )
    raise typer.Exit(run_with(flags, typer.echo))
