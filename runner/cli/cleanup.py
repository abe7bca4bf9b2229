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

from runner.cli.options import CoordinatorOption, LedgerOption
from runner.errors import CloreRunError
from runner.ledger import DEFAULT_PATH
from runner.stores.ledger import ledger_exists, open_ledger
from runner.stores.target import coordinator_from, ledger_target, redact_url

if TYPE_CHECKING:  # the Clore client loads only when there is something to clean up
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.cleanup import Action
    from runner.stores.reaper import Reaped

ClientFactory = Callable[[], "CloreClient"]


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the `cleanup` command to `app`. `client_factory` defaults to CloreClient.from_env."""
    make_client = client_factory or _client_from_env

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
    ) -> None:
        """Cancel every order the ledger does not mark released, and say what was done. With a
        coordinator: settle what dead pool holders left (and `--run`'s rentals, if given)."""
        try:
            shared = coordinator_from(coordinator)
            ledger_path = ledger_target(ledger_arg, shared, DEFAULT_PATH)
            if shared is not None:
                _reap(shared, ledger_path, make_client, dry_run)
                if run_id is None:  # the shared ledger also holds live runs: only the dead
                    return
        except CloreRunError as exc:
            _fail(str(exc))
        if not ledger_exists(ledger_path):
            typer.echo(f"no ledger at {ledger_path}: nothing to clean up")
            return
        try:
            with open_ledger(ledger_path, read_only=dry_run) as ledger:
                if not ledger.unreleased(run_id):
                    where = redact_url(str(ledger_path))
                    typer.echo(f"nothing to clean up: every rental in {where} is released")
                    return
                from runner.backends.clore.cleanup import reconcile

                client = make_client()
                if not dry_run:  # a dry run writes nothing, this file included
                    from runner.backends.clore.factory import share_limits

                    share_limits(client, ledger_path)
                actions = reconcile(ledger, client, dry_run=dry_run, run_id=run_id)
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


def _reap(url: str, ledger_url: str | Path, make_client: ClientFactory, dry_run: bool) -> None:
    """Take every expired pool lease (SKIP LOCKED: cleanups running at once share the work),
    cancel what its holder left and settle its reservations."""
    import os
    import socket

    from runner.stores.pg_pools import PostgresPools
    from runner.stores.reaper import reap

    with PostgresPools(url) as pools:
        if dry_run:
            for name in pools.names():
                usage = pools.usage(name)
                typer.echo(f"pool {name}: {usage.expired_holders} expired holder(s) to reap")
            return
        reaper = f"cleanup@{socket.gethostname()}:{os.getpid()}"
        with open_ledger(ledger_url) as ledger:
            client: CloreClient | None = None
            while True:
                if client is None:
                    if not any(pools.usage(n).expired_holders for n in pools.names()):
                        break
                    client = make_client()
                reaped = reap(pools, ledger, client, reaper)
                if not reaped:
                    break
                for done in reaped:
                    typer.echo(_reaped_line(done))
                if any(not d.done for d in reaped):
                    _fail("some rentals of a dead holder are not confirmed released: run again")
    typer.echo("pool leases: nothing (more) to reap")


def _reaped_line(done: Reaped) -> str:
    billed = sum(done.settled.values())
    return (
        f"reaped {done.lease.holder} (pool {done.lease.pool}): {len(done.actions)} rental(s) "
        f"reconciled, {len(done.settled)} reservation(s) settled at ${billed:.2f}"
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
