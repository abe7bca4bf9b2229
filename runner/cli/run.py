"""`clore-run run PIPELINE [options]` (or `clore-run PIPELINE`): flags in, one run, an exit code."""

from __future__ import annotations

import dataclasses
import json
import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from runner.errors import UsageError
from runner.ledger import DEFAULT_PATH as DEFAULT_LEDGER
from runner.stores.target import coordinator_from, ledger_target


class BackendName(str, Enum):
    local = "local"
    ssh = "ssh"
    clore = "clore"


def register(app: typer.Typer) -> None:
    app.command()(run)


def run(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    backend: Annotated[
        BackendName | None,
        typer.Option(help="Where jobs run (default: clore when CLORE_API_KEY is set, else local)."),
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
        typer.Option(help="Override the budget: USD for the whole run, a positive amount (2.50)."),
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
        typer.Option("--host", help="--backend ssh: user@HOST[:PORT] (repeat for more hosts)."),
    ] = None,
    identity: Annotated[
        Path | None, typer.Option(help="--backend ssh: private key file (default ~/.ssh/id_*).")
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(
            help="--backend clore: the record of rentals, for `cleanup`: a file, or a "
            f"postgresql:// URL [default: {DEFAULT_LEDGER}, or the coordinator]",
            metavar="FILE|URL",
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(help="--backend clore: join this budget pool on the coordinator."),
    ] = None,
    coordinator: Annotated[
        str | None,
        typer.Option(
            help="The shared PostgreSQL of pools and ledger; default $CLORE_RUN_COORDINATOR.",
            metavar="URL",
        ),
    ] = None,
) -> None:
    """Run a pipeline: exit 0 all passed, 1 a job failed, 3 infrastructure, 130 interrupted."""
    from runner.cli.validate import show_warnings
    from runner.plan import build_plan, render_plan
    from runner.run_command import RunOptions, execute, select_jobs
    from runner.spec.loader import load_pipeline
    from runner.spec.models import MAX_CONCURRENCY

    loaded = load_pipeline(pipeline)
    show_warnings(loaded)
    if dry_run:
        typer.echo(render_plan(build_plan(select_jobs(loaded, job or []))))
        return
    chosen = backend or (BackendName.clore if os.environ.get("CLORE_API_KEY") else None)
    if chosen is None:
        typer.echo("clore-run: no CLORE_API_KEY set: running locally (--backend local)", err=True)
        chosen = BackendName.local
    if pool is not None and chosen is not BackendName.clore:
        raise UsageError(f"--pool {pool}: pools hold rented servers", hint="use --backend clore")
    options = RunOptions(
        out_dir=out,
        concurrency=concurrency,
        budget_usd=budget,
        jobs=job or [],
        baseline=_read_baseline(baseline),
    )
    if budget is not None:
        if not budget > 0 or budget == float("inf"):  # as the file's `budget:` must be
            raise UsageError(
                f"--budget {budget:g}: must be a positive amount of USD for the whole run",
                "for example --budget 2.50",
            )
        loaded = dataclasses.replace(loaded, budget_usd=budget)
    if concurrency is not None:  # the clore backend caps the servers it holds at this
        if not 1 <= concurrency <= MAX_CONCURRENCY:  # as the file's `concurrency:` must be
            raise UsageError(
                f"--concurrency {concurrency}: must be from 1 to {MAX_CONCURRENCY} servers "
                "or jobs at once",
                "for example --concurrency 4",
            )
        loaded = dataclasses.replace(loaded, concurrency=concurrency)
    if chosen is BackendName.clore:
        from runner.backends.clore.factory import clore_backend

        shared = coordinator_from(coordinator)
        where = ledger_target(ledger, shared, DEFAULT_LEDGER)
        made = clore_backend(loaded, where, options.run_id, pool=pool, coordinator=shared)
        _, code = execute(loaded, made, options)
    elif chosen is BackendName.ssh:
        from runner.backends.ssh.backend import SshBackend

        hosts = list(host or loaded.hosts)
        if not hosts:
            raise UsageError(
                "--backend ssh needs hosts", "pass --host root@HOST[:PORT] or set `hosts:`"
            )
        _, code = execute(loaded, SshBackend.from_flags(hosts, identity), options)
    else:
        from runner.backends.local import LocalBackend

        _, code = execute(loaded, LocalBackend(), options)
    raise typer.Exit(code)


def _read_baseline(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from runner.report import load_summary

    try:
        return load_summary(path)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--baseline {path}: not JSON ({exc.msg.lower()} at line {exc.lineno}, "
            f"column {exc.colno})",
            "pass the summary.json of an earlier run",
        ) from None
    except UnicodeDecodeError:
        raise UsageError(
            f"--baseline {path}: not JSON (not UTF-8 text)",
            "pass the summary.json of an earlier run",
        ) from None
    except ValueError as exc:  # JSON, but not an object
        what = str(exc).removeprefix(f"{path}: ")
        raise UsageError(
            f"--baseline {path}: {what}", "pass the summary.json of an earlier run"
        ) from None
    except OSError as exc:
        raise UsageError(f"--baseline {path}: cannot read it ({exc.strerror})") from None
