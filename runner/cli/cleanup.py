"""`clore-run cleanup`: give back every server the ledger says is not released yet.

Exit 0 when nothing is left unreleased (or, with --dry-run, when every rental could be settled),
3 when a rental could not be checked or cancelled, the key is missing or the ledger is unreadable.
With nothing to clean up it needs no API key, so an always-run CI step after a local run passes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner import liveness
from runner.cli.options import CoordinatorOption, LedgerOption
from runner.clock import SYSTEM_CLOCK
from runner.errors import CloreRunError
from runner.stores.ledger import DEFAULT_PATH, ledger_exists, open_ledger
from runner.stores.target import coordinator_from, ledger_target, redact_url

if TYPE_CHECKING:  # the Clore client loads only when there is something to clean up
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.cleanup import Action
    from runner.backends.clore.reaper import Reaped
    from runner.stores.ledger import Rental, RentalLedger
    from runner.stores.pools import HeldLease
    from runner.stores.pools.postgres import PostgresPools

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
        runners: Annotated[
            bool,
            typer.Option(
                "--runners",
                help="Instead: cancel GPU-runner rentals past their cap, from the records the "
                "action uploads as artifacts (GITHUB_TOKEN with actions: read).",
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
        if runners:  # the cron reaper of `clore-run runner` (runner/gh_runner/reap.py)
            _reap_runners(make_client, dry_run)
            return
        try:
            shared = coordinator_from(coordinator)
            ledger_path = ledger_target(ledger_arg, shared, DEFAULT_PATH)
            if shared is not None:
                _reap(shared, ledger_path, make_client, dry_run, wait)
                if run_id is None:  # the shared ledger also holds live runs: only the dead
                    return
        except CloreRunError as exc:
            _fail(str(exc), exc.exit_code)  # a bad --ledger is a usage error
        if not ledger_exists(ledger_path):
            typer.echo(f"no ledger at {ledger_path}: nothing to clean up")
            return
        try:
            with open_ledger(ledger_path, read_only=dry_run) as ledger:
                unreleased = ledger.unreleased(run_id)
                if not unreleased:
                    where = redact_url(str(ledger_path))
                    typer.echo(f"nothing to clean up: every rental in {where} is released")
                    return
                running = _running(unreleased)
                for run, holder in running.items():
                    typer.echo(f"left alone: run {run} is still running ({holder.describe()})")
                actions: list[Action] = []
                if any(r.run_id not in running for r in unreleased):
                    actions = _reconcile(ledger, ledger_path, make_client, dry_run, run_id, running)
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
        if running:
            _fail(
                f"{len(running)} run(s) still running hold rentals: they give their servers "
                "back themselves; run `clore-run cleanup` again once they have ended"
            )


def _reconcile(
    ledger: RentalLedger,
    ledger_path: str | Path,
    make_client: ClientFactory,
    dry_run: bool,
    run_id: str | None,
    running: Mapping[str, object],
) -> list[Action]:
    from runner.backends.clore.cleanup import reconcile

    client = make_client()
    on_stderr(client)
    if not dry_run:  # a dry run writes nothing, this file included
        from runner.backends.clore.factory import share_limits

        share_limits(client, ledger_path)
    return reconcile(ledger, client, dry_run=dry_run, run_id=run_id, skip_runs=set(running))


def _running(rentals: list[Rental]) -> dict[str, liveness.Holder]:
    """The runs among `rentals`' that are provably still running: another process of this
    host that is alive (this process cleaning up its own rentals is not one)."""
    running: dict[str, liveness.Holder] = {}
    for rental in rentals:
        holder = liveness.Holder.parse(rental.owner)
        if holder is None or holder.pid == os.getpid() or liveness.state(holder) is not True:
            continue
        running[rental.run_id] = holder
    return running


def _reap(
    url: str, ledger_url: str | Path, make_client: ClientFactory, dry_run: bool, wait: bool
) -> None:
    """Take every expired pool lease (SKIP LOCKED: cleanups running at once share the work)
    and the live lease of every holder provably dead (a process of this host that is gone),
    cancel what each left and settle its reservations. A live-looking lease with servers that
    may bill is waited for (`wait`, at most its ttl) or reported: exit 3, with when to run
    again; never "nothing to reap" while such a lease is in sight."""
    import socket

    from runner.stores.pools.postgres import PostgresPools

    with PostgresPools(url) as pools:
        if dry_run:
            for name in pools.names():
                usage = pools.usage(name)
                typer.echo(f"pool {name}: {usage.expired_holders} expired holder(s) to reap")
            for lease in pools.live_leases():
                if lease.unsettled:
                    typer.echo(_live_line(lease))
            return
        reaper = f"cleanup@{socket.gethostname()}:{os.getpid()}"
        with open_ledger(ledger_url) as ledger:
            session = _Reaping(pools, ledger, make_client, reaper)
            held = session.run()
            if held and wait:
                longest_s = max(min(h.expires_in_s, h.ttl_s) for h in held)
                typer.echo(f"pool leases: waiting {longest_s:.0f} s for {_names(held)} to expire")
                SYSTEM_CLOCK.sleep(longest_s + 1.0)
                held = session.run()
    if held:
        for h in held:
            typer.echo(
                f"not reaped: {h.holder} (pool {h.pool}) holds {h.unsettled} server(s) that may "
                f"bill; its lease is live for {h.expires_in_s:.0f} s more (its holder may still "
                "be running elsewhere)"
            )
        again_s = max(h.expires_in_s for h in held)
        _fail(
            f"{len(held)} live-looking lease(s) could not be taken: run `clore-run cleanup "
            f"--coordinator URL` again in {again_s:.0f} s, or with --wait"
        )
    typer.echo("pool leases: nothing (more) to reap")


def _live_line(held: HeldLease) -> str:
    """What a cleanup would do with a live lease that holds servers (a dry run)."""
    alive = liveness.state(liveness.Holder.parse(held.owner))
    if alive is False:
        what = "its process is gone: would reap it at once"
    elif alive:
        what = "its process runs on this host: left alone"
    else:
        what = f"its lease is live for {held.expires_in_s:.0f} s more: not reaped before that"
    return f"{held.holder} (pool {held.pool}) holds {held.unsettled} server(s); {what}"


def _reap_runners(make_client: ClientFactory, dry_run: bool) -> None:
    from runner.gh_runner.reap_cmd import reap_from_github

    try:
        left = reap_from_github(make_client, dry_run, typer.echo)
    except CloreRunError as exc:
        _fail(str(exc))
    if left:
        _fail(f"{left} runner rental(s) may still be billed: run again, or cancel on clore.ai")


@dataclass
class _Reaping:
    pools: PostgresPools
    ledger: RentalLedger
    make_client: ClientFactory
    reaper: str
    _client: CloreClient | None = None

    def client(self) -> CloreClient:
        if self._client is None:
            self._client = self.make_client()
            on_stderr(self._client)
        return self._client

    def run(self) -> list[HeldLease]:
        """Reap what can be reaped now; the live-looking leases left that hold servers."""
        from runner.backends.clore.reaper import reap, reap_proven_dead

        pools = self.pools
        while any(pools.usage(n).expired_holders for n in pools.names()):
            reaped = reap(pools, self.ledger, self.client(), self.reaper)
            if not reaped:
                break
            self._say(reaped)
        held = [h for h in pools.live_leases() if h.unsettled]
        if any(liveness.state(liveness.Holder.parse(h.owner)) is False for h in held):
            self._say(reap_proven_dead(pools, self.ledger, self.client(), self.reaper))
            held = [h for h in pools.live_leases() if h.unsettled]
        left = []
        for h in held:
            holder = liveness.Holder.parse(h.owner)
            if liveness.state(holder) is True and holder is not None:
                typer.echo(
                    f"left alone: {h.holder} (pool {h.pool}) is running ({holder.describe()})"
                )
            else:
                left.append(h)
        return left

    def _say(self, reaped: list[Reaped]) -> None:
        for done in reaped:
            typer.echo(_reaped_line(done))
        if any(not d.done for d in reaped):
            _fail("some rentals of a dead holder are not confirmed released: run again")


def _names(held: list[HeldLease]) -> str:
    return ", ".join(h.holder for h in held)


def _reaped_line(done: Reaped) -> str:
    billed = sum(done.settled.values())
    return (
        f"reaped {done.lease.holder} (pool {done.lease.pool}): {len(done.actions)} rental(s) "
        f"reconciled, {len(done.settled)} reservation(s) settled at ${billed:.2f}"
    )


def on_stderr(client: CloreClient) -> None:
    from runner.backends.clore import waits

    waits.on_stderr(client)


def _client_from_env() -> CloreClient:
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _line(action: Action) -> str:
    r = action.rental
    order = action.order_id if action.order_id is not None else "-"
    return f"{r.run_id}/{r.job_id}  server {r.server_id}  order {order}  {action.describe()}"


def _fail(message: str, exit_code: int = 3) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exit_code)
