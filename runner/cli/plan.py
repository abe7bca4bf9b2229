"""`clore-run plan PIPELINE [--json] [--backend clore]`: order, asks and costs; rents nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from runner.cli.root import EXIT_INFRA
from runner.cli.validate import show_warnings
from runner.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command()(plan)


def plan(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    backend: Annotated[
        str, typer.Option(help="`clore`: also the offer each job would take today and its cost.")
    ] = "none",
) -> None:
    """Show the order in waves, each job's ask and the critical path. Rents nothing."""
    from runner.plan import build_plan, render_plan
    from runner.spec.loader import load_pipeline

    loaded = load_pipeline(pipeline)
    show_warnings(loaded)
    result = build_plan(loaded)
    unfit = False
    if backend == "clore":
        from runner.backends.clore.api import CloreClient
        from runner.backends.clore.fees import read_fee_schedule
        from runner.backends.clore.market import offers_from_servers
        from runner.backends.clore.plan_offers import plan_offers, render_offers

        client = CloreClient.from_env()
        # The account's fee rates, read once as `run` reads them (documented ones if not).
        fees = read_fee_schedule(client, loaded.currency)
        servers = client.marketplace().servers
        offers = offers_from_servers(servers, loaded.currency, fees=fees.rates)
        result["clore"] = plan_offers(loaded, offers, fees)
        # The run simulated on these offers, at the top where a reader of the plan looks first.
        result["makespan"] = result["clore"]["makespan"]
        result["cost"] = result["clore"]["cost"]
        unfit = bool(result["clore"]["unfit"])
    elif backend != "none":
        raise UsageError(f"--backend {backend}: plan knows `clore` only", "omit it or use clore")
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(render_plan(result))
        if "clore" in result:
            typer.echo(render_offers(result["clore"]))
    if unfit:
        raise typer.Exit(EXIT_INFRA)
