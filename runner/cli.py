"""The `clore-run` command line: wires adapters and maps every error to an exit code.

`main()` is the one error boundary: no traceback reaches the user for any input. Exit codes:
0 every job passed, 1 a job failed, 2 invalid pipeline or usage, 3 infrastructure, 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from runner import __version__
from runner.backends.clore.api import CloreClient
from runner.backends.clore.cleanup_cmd import register as register_cleanup
from runner.backends.clore.factory import clore_backend
from runner.backends.clore.market import offers_from_servers
from runner.backends.clore.offers_cmd import register as register_offers
from runner.backends.clore.plan_offers import plan_offers, render_offers
from runner.backends.local import LocalBackend
from runner.backends.ssh import SshBackend
from runner.errors import CloreRunError, UsageError
from runner.ledger import DEFAULT_PATH as DEFAULT_LEDGER
from runner.plan import build_plan, render_plan
from runner.report import load_summary
from runner.report.comment_cmd import register as register_comment
from runner.report.github_actions import mask_secrets
from runner.run_command import RunOptions, execute, select_jobs
from runner.serve.cli import register as register_serve
from runner.spec.loader import load_pipeline
from runner.spec.models import PipelineSchema

app = typer.Typer(
    name="clore-run",
    help="Run pipelines of GPU jobs on servers rented from Clore.ai (or locally, for free).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = 130


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clore-run {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """clore-run PIPELINE is short for clore-run run PIPELINE."""


@app.command()
def validate(
    pipelines: Annotated[list[Path], typer.Argument(help="Pipeline files to check.")],
) -> None:
    """Check pipeline files: exit 0, or 2 with FILE:LINE:COL errors."""
    failed = False
    for path in pipelines:
        try:
            pipeline = load_pipeline(path)
        except CloreRunError as exc:
            typer.echo(str(exc), err=True)
            failed = True
        else:
            typer.echo(f"{path}: ok ({len(pipeline.jobs)} jobs)")
    if failed:
        raise typer.Exit(EXIT_USAGE)


@app.command()
def plan(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    backend: Annotated[
        str, typer.Option(help="`clore`: also the offer each job would take today and its cost.")
    ] = "none",
) -> None:
    """Show the order in waves, each job's ask and the critical path. Rents nothing."""
    loaded = load_pipeline(pipeline)
    result = build_plan(loaded)
    unfit = False
    if backend == "clore":
        client = CloreClient.from_env()
        offers = offers_from_servers(client.marketplace().servers, loaded.currency)
        result["clore"] = plan_offers(loaded, offers)
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


class BackendName(str, Enum):
    local = "local"
    ssh = "ssh"
    clore = "clore"


@app.command()
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
        int | None, typer.Option(min=1, help="Override the pipeline's concurrency.")
    ] = None,
    budget: Annotated[
        float | None, typer.Option(min=0.0, help="Override the budget (USD, whole run).")
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
        Path, typer.Option(help="--backend clore: the record of rentals, for `cleanup`.")
    ] = DEFAULT_LEDGER,
) -> None:
    """Run a pipeline: exit 0 all passed, 1 a job failed, 3 infrastructure, 130 interrupted."""
    loaded = load_pipeline(pipeline)
    if dry_run:
        typer.echo(render_plan(build_plan(select_jobs(loaded, job or []))))
        return
    chosen = backend or (BackendName.clore if os.environ.get("CLORE_API_KEY") else None)
    if chosen is None:
        typer.echo("clore-run: no CLORE_API_KEY set: running locally (--backend local)", err=True)
        chosen = BackendName.local
    options = RunOptions(
        out_dir=out,
        concurrency=concurrency,
        budget_usd=budget,
        jobs=job or [],
        baseline=_read_baseline(baseline),
    )
    if budget is not None:
        if not budget > 0 or budget == float("inf"):  # as the file's `budget:` must be
            raise UsageError(f"--budget {budget:g}: must be a positive amount of USD")
        loaded = dataclasses.replace(loaded, budget_usd=budget)
    if concurrency is not None:  # the clore backend caps the servers it holds at this
        loaded = dataclasses.replace(loaded, concurrency=concurrency)
    if chosen is BackendName.clore:
        _, code = execute(loaded, clore_backend(loaded, ledger, options.run_id), options)
    elif chosen is BackendName.ssh:
        hosts = list(host or loaded.hosts)
        if not hosts:
            raise UsageError(
                "--backend ssh needs hosts", "pass --host root@HOST[:PORT] or set `hosts:`"
            )
        _, code = execute(loaded, SshBackend.from_flags(hosts, identity), options)
    else:
        _, code = execute(loaded, LocalBackend(), options)
    raise typer.Exit(code)


def _read_baseline(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        return load_summary(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--baseline {path}: cannot read it ({exc})") from None


@app.command()
def schema() -> None:
    """Print the JSON Schema of the pipeline format (for editors)."""
    document = PipelineSchema.model_json_schema(by_alias=True)
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    typer.echo(json.dumps(document, indent=2))


register_offers(app)
register_comment(app)
register_cleanup(app)
register_serve(app)


def _insert_run(argv: list[str]) -> list[str]:
    """`clore-run PIPELINE ...` -> `clore-run run PIPELINE ...`."""
    command = typer.main.get_command(app)
    names = set(getattr(command, "commands", {}))
    if argv and argv[0] not in names and not argv[0].startswith("-"):
        return ["run", *argv]
    return argv


def _click_exit_code(exc: Exception) -> int | None:
    """Exit code for the parser's own exceptions (usage errors, Abort, Exit), else None.

    Recent Typer versions carry a private copy of click, so these are matched by shape rather
    than by importing click's classes.
    """
    kind = type(exc).__name__
    if kind == "Abort":
        typer.echo("clore-run: interrupted", err=True)
        return EXIT_INTERRUPTED
    if kind == "Exit":
        return int(getattr(exc, "exit_code", 0))
    show = getattr(exc, "show", None)
    if callable(show) and hasattr(exc, "exit_code"):
        show()
        return EXIT_USAGE
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app inside the one error boundary."""
    mask_secrets()  # before anything else is printed
    args = _insert_run(list(sys.argv[1:] if argv is None else argv))
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="clore-run", standalone_mode=False)
    except CloreRunError as exc:
        typer.echo(f"clore-run: {exc}" if exc.exit_code != EXIT_USAGE else str(exc), err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        typer.echo("clore-run: interrupted", err=True)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the boundary: a bug must not print a traceback at a user
        code = _click_exit_code(exc)
        if code is None:
            if os.environ.get("CLORE_RUN_DEBUG"):
                raise
            typer.echo(
                f"clore-run: internal error: {type(exc).__name__}: {exc} "
                "(set CLORE_RUN_DEBUG=1 for a traceback, and please report it)",
                err=True,
            )
            code = EXIT_INFRA
    sys.exit(code if isinstance(code, int) else 0)
