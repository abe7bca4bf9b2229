"""`clore-run cleanup`: give back every server the ledger says is not released yet.

Exit 0 when nothing is left unreleased (or, with --dry-run, when every rental could be settled),
3 when a rental could not be checked or cancelled, the key is missing or the ledger is unreadable.
With nothing to clean up it needs no API key, so an always-run CI step after a local run passes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner.errors import CloreRunError
from runner.ledger import DEFAULT_PATH, Ledger

if TYPE_CHECKING:  # the Clore client loads only when there is something to clean up
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.cleanup import Action

ClientFactory = Callable[[], "CloreClient"]


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the `cleanup` command to `app`. `client_factory` defaults to CloreClient.from_env."""
    make_client = client_factory or _client_from_env

    @app.command("cleanup")
    def cleanup(
        ledger_path: Annotated[
            Path, typer.Option("--ledger", help="The rental ledger.", metavar="FILE")
        ] = DEFAULT_PATH,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Only say what would be done.")
        ] = False,
        run_id: Annotated[
            str | None, typer.Option("--run", help="Only this run's rentals.", metavar="RUN_ID")
        ] = None,
    ) -> None:
        """Cancel every order the ledger does not mark released, and say what was done."""
        if not ledger_path.exists():
            typer.echo(f"no ledger at {ledger_path}: nothing to clean up")
            return
        try:
            with Ledger(ledger_path) as ledger:
                if not ledger.unreleased(run_id):
                    typer.echo(f"nothing to clean up: every rental in {ledger_path} is released")
                    return
                from runner.backends.clore.cleanup import reconcile

                actions = reconcile(ledger, make_client(), dry_run=dry_run, run_id=run_id)
        except CloreRunError as exc:  # an unreadable ledger, a missing key (with how to set it)
            _fail(str(exc))
        for action in actions:
            typer.echo(_line(action))
        left = sum(not a.resolved for a in actions)
        if left:
            _fail(
                f"{left} rental(s) may still be billed: run `clore-run cleanup` again, "
                "or cancel them on clore.ai"
            )


def _client_from_env() -> CloreClient:
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _line(action: Action) -> str:
    r = action.rental
    order = action.order_id if action.order_id is not None else "-"
    return f"{r.run_id}/{r.job_id}  server {r.server_id}  order {order}  {action.describe()}"


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(3)
