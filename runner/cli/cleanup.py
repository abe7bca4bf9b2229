"""`clore-run cleanup`: give back every server the ledger says is not released yet.

Each renting backend in the registry (runner.backends.registry) does its own cleanup (its
spec's `cleanup`; Clore's is runner/backends/clore/sweep.py); this command reads the flags, asks
each in turn, and prints what fails as `clore-run: ...` (and its `hint:`) with its exit code.

Exit 0 when nothing is left unreleased (or, with --dry-run, when every rental could be settled),
3 when a rental could not be checked or cancelled, the key is missing or the ledger is unreadable.
With nothing to clean up it needs no API key, so an always-run CI step after a local run passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner.backends.registry import BACKENDS
from runner.backends.spec import CleanupAsk
from runner.cli.boundary import said, shaped
from runner.cli.options import CoordinatorOption, LedgerOption
from runner.errors import CloreRunError

if TYPE_CHECKING:  # the GPU runners rent on Clore: its client loads only for --runners
    from runner.backends.clore.api import CloreClient

ClientFactory = Callable[[], "CloreClient"]


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the `cleanup` command to `app`. `client_factory` stands in for the renting
    backend's API client (tests); by default each backend makes its own from the environment."""

    @app.command("cleanup")
    def cleanup(
        ledger_arg: LedgerOption = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Only say what would be done.")
        ] = False,
        run_id: Annotated[
            str | None, typer.Option("--run", help="Only this run's rentals.", metavar="RUN_ID")
        ] = None,
        coordinator: CoordinatorOption = None,
        runners: Annotated[
            bool,
            typer.Option(
                "--runners",
                help="Instead: cancel GPU-runner rentals past their cap, from the records the "
                "action uploads as artifacts (GITHUB_TOKEN with actions: read).",
            ),
        ] = False,
        workflows: Annotated[
            str,
            typer.Option(
                "--workflows",
                envvar="CLORE_RUNNER_WORKFLOWS",
                help="With --runners: the workflow files (comma-separated, under "
                ".github/workflows/) whose runs' records are believed.",
                metavar="FILE,...",
            ),
        ] = "gpu-runner.yml,gpu-runner-matrix.yml",
        max_hours: Annotated[
            float,
            typer.Option(
                "--max-hours",
                envvar="CLORE_RUNNER_MAX_HOURS",
                help="With --runners: no runner lives longer than this from its create, "
                "whatever its record says.",
                min=0.1,
                max=24 * 30,
            ),
        ] = 24.0,
        cancel_unproven: Annotated[
            bool,
            typer.Option(
                "--cancel-unproven",
                help="Also cancel the orders that may be ours but cannot be proven (our create "
                "was sent, yet its tag is absent or unreadable; with --coordinator, a dead "
                "holder's too; with --runners, a live order a record names and does not prove, "
                "once it has lived --max-hours). Only for an API key that no other run, machine "
                "or person uses: an order of theirs would be cancelled too.",
            ),
        ] = False,
        wait: Annotated[
            bool,
            typer.Option(
                "--wait",
                help="With a coordinator: wait (at most a lease's ttl) for live-looking leases "
                "that hold servers to expire, then reap them.",
            ),
        ] = False,
    ) -> None:
        """Cancel every order the ledger does not mark released, and say what was done. With a
        coordinator: settle what dead pool holders left (and `--run`'s rentals, if given)."""
        if runners:  # the cron reaper of `clore-run runner` (runner/gh_runner/reap_cmd.py)
            names = tuple(w.strip() for w in workflows.split(",") if w.strip())
            make = client_factory or _client_from_env
            _reap_runners(make, dry_run, names, max_hours, cancel_unproven)
            return
        ask = CleanupAsk(
            ledger_arg,
            coordinator,
            run_id,
            dry_run,
            wait,
            typer.echo,
            client_factory,
            cancel_unproven=cancel_unproven,
        )
        failed: CloreRunError | None = None
        for spec in BACKENDS.values():
            if spec.cleanup is None:
                continue
            try:
                spec.cleanup(ask)
            except CloreRunError as exc:  # the next backend still cleans up its own
                typer.echo(said(exc), err=True)
                failed = failed or exc
        if failed is not None:
            raise typer.Exit(failed.exit_code)


def _reap_runners(
    make_client: ClientFactory,
    dry_run: bool,
    workflows: tuple[str, ...],
    max_hours: float,
    cancel_unproven: bool = False,
) -> None:
    from runner.gh_runner.reap_cmd import reap_from_github

    if not workflows:
        _fail("--workflows is empty: name the workflow files that start runners", 2)
    try:
        left = reap_from_github(
            make_client,
            dry_run,
            typer.echo,
            workflows=workflows,
            max_life_s=max_hours * 3600,
            cancel_unproven=cancel_unproven,
        )
    except CloreRunError as exc:
        _fail(str(exc), exc.exit_code)
    if left:
        _fail(
            f"{left} runner rental(s) may still be billed (each named above)",
            hint="run `clore-run cleanup --runners` again; one that may be ours, if no other run "
            "uses this API key, with --cancel-unproven; else cancel them on clore.ai",
        )


def _client_from_env() -> CloreClient:
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _fail(message: str, exit_code: int = 3, hint: str = "") -> NoReturn:
    typer.echo(shaped(message, hint), err=True)
    raise typer.Exit(exit_code)
