"""`clore-run cleanup` for Clore (runner.backends.clore.spec's `cleanup`): give back every
server the ledger says is not released yet, and with a coordinator settle what dead pool holders
left.

Each failure is raised as a CloreRunError (exit 3, or 2 for a bad --ledger), which the command
prints as `clore-run: ...` and its `hint:`. With nothing to clean up it needs no API key, so an
always-run CI step after a local run passes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner import liveness
from runner.backends.clore.api import CloreClient
from runner.backends.clore.cleanup import Action, reconcile
from runner.backends.clore.factory import share_limits
from runner.backends.clore.waits import on_stderr
from runner.backends.spec import CleanupAsk, Say
from runner.clock import SYSTEM_CLOCK
from runner.errors import CloreRunError, InfrastructureError
from runner.stores.ledger import DEFAULT_PATH, ledger_exists, open_ledger
from runner.stores.target import coordinator_from, ledger_target, redact_url

if TYPE_CHECKING:
    from runner.backends.clore.reaper import Reaped
    from runner.stores.ledger import Rental, RentalLedger
    from runner.stores.pools import HeldLease
    from runner.stores.pools.postgres import PostgresPools

ClientFactory = Callable[[], CloreClient]


def cleanup(ask: CleanupAsk) -> None:
    """Cancel every order the ledger does not mark released, and say what was done. With a
    coordinator: settle what dead pool holders left (and `--run`'s rentals, if given)."""
    make_client: ClientFactory = ask.client or CloreClient.from_env
    shared = coordinator_from(ask.coordinator)  # a bad --ledger: its own exit code (2)
    ledger_path = ledger_target(ask.ledger, shared, DEFAULT_PATH)
    if shared is not None:
        _reap(shared, ledger_path, make_client, ask)
        if ask.run_id is None:  # the shared ledger also holds live runs: only the dead
            return
    if not ledger_exists(ledger_path):
        ask.say(f"no ledger at {ledger_path}: nothing to clean up")
        return
    try:
        actions, running = _sweep(ledger_path, make_client, ask)
    except CloreRunError as exc:  # an unreadable ledger, a missing key (with how to set it)
        raise InfrastructureError(exc.message, exc.hint) from None
    for action in actions:
        ask.say(_line(action))
    unproven = [a for a in actions if a.kind == "unproven"]
    if unproven:
        raise InfrastructureError(
            f"{len(unproven)} rental(s) left an order that may be ours and cannot be proven: "
            "named above, not cancelled, and it may be billed",
            "if no other run uses this API key, run `clore-run cleanup --cancel-unproven` to "
            "cancel them; else check them on clore.ai",
        )
    left = sum(not a.resolved for a in actions)
    if left:
        # The API's own hint (a refused key, no network) once, here, not on every rental's line.
        hints = sorted({a.hint for a in actions if not a.resolved and a.hint})
        first = f"{'; '.join(hints)}; then " if hints else ""
        raise InfrastructureError(
            f"{left} rental(s) may still be billed",
            f"{first}run `clore-run cleanup` again, or cancel them on clore.ai",
        )
    if running:
        raise InfrastructureError(
            f"{len(running)} run(s) still running hold rentals: they give their servers "
            "back themselves",
            "run `clore-run cleanup` again once they have ended",
        )


def _sweep(
    ledger_path: str | Path, make_client: ClientFactory, ask: CleanupAsk
) -> tuple[list[Action], dict[str, str]]:
    """The ledger's unreleased rentals reconciled with `my_orders` (those of runs still
    running left alone): what was done, and the runs left alone."""
    with open_ledger(ledger_path, read_only=ask.dry_run) as ledger:
        unreleased = ledger.unreleased(ask.run_id)
        if not unreleased:
            where = redact_url(str(ledger_path))
            ask.say(f"nothing to clean up: every rental in {where} is released")
            return [], {}
        running = _running(unreleased, named=ask.run_id is not None)
        for run, why in running.items():
            ask.say(f"left alone: run {run} {why}")
        if all(r.run_id in running for r in unreleased):
            return [], running
        return _reconcile(ledger, ledger_path, make_client, ask, running), running


def _reconcile(
    ledger: RentalLedger,
    ledger_path: str | Path,
    make_client: ClientFactory,
    ask: CleanupAsk,
    running: Mapping[str, object],
) -> list[Action]:
    client = make_client()
    on_stderr(client)
    if not ask.dry_run:  # a dry run writes nothing, this file included
        share_limits(client, ledger_path)
    return reconcile(
        ledger,
        client,
        dry_run=ask.dry_run,
        run_id=ask.run_id,
        skip_runs=set(running),
        cancel_unproven=ask.cancel_unproven,
    )


def _running(rentals: list[Rental], named: bool = False) -> dict[str, str]:
    """The runs among `rentals`' that may still be running, with why: another process of
    this host that is alive, or one recorded where nothing can be proven from here (another
    container sharing the ledger, another host, a /proc that hides it). Only a run provably
    dead (or this process, cleaning up its own) is swept; a row that records no process is
    swept as before. `named` (`--run`): the operator asked for that run, so only a run
    provably alive is left alone."""
    running: dict[str, str] = {}
    for rental in rentals:
        holder = liveness.Holder.parse(rental.owner)
        if holder is None or holder.pid == os.getpid():
            continue
        alive = liveness.state(holder)
        if alive:
            running[rental.run_id] = f"is still running ({holder.describe()})"
        elif alive is None and not named:
            running[rental.run_id] = (
                f"may still be running ({holder.describe()}, in a place this cleanup cannot "
                "see into: another host or container); `--run` it to cancel on purpose"
            )
    return running


def _reap(url: str, ledger_url: str | Path, make_client: ClientFactory, ask: CleanupAsk) -> None:
    """Take every expired pool lease (SKIP LOCKED: cleanups running at once share the work)
    and the live lease of every holder provably dead (a process of this host that is gone),
    cancel what each left and settle its reservations. A live-looking lease with servers that
    may bill is waited for (`wait`, at most its ttl) or reported: exit 3, with when to run
    again; never "nothing to reap" while such a lease is in sight."""
    import socket  # only with a coordinator: the reaper's name

    from runner.stores.pools.postgres import PostgresPools  # psycopg: the postgres extra

    with PostgresPools(url) as pools:
        if ask.dry_run:
            for name in pools.names():
                usage = pools.usage(name)
                ask.say(f"pool {name}: {usage.expired_holders} expired holder(s) to reap")
            for lease in pools.live_leases():
                if lease.unsettled:
                    ask.say(_live_line(lease))
            return
        reaper = f"cleanup@{socket.gethostname()}:{os.getpid()}"
        with open_ledger(ledger_url) as ledger:
            session = _Reaping(pools, ledger, make_client, reaper, ask.say, ask.cancel_unproven)
            held = session.run()
            if held and ask.wait:
                longest_s = max(min(h.expires_in_s, h.ttl_s) for h in held)
                ask.say(f"pool leases: waiting {longest_s:.0f} s for {_names(held)} to expire")
                SYSTEM_CLOCK.sleep(longest_s + 1.0)
                held = session.run()
    if held:
        for h in held:
            ask.say(
                f"not reaped: {h.holder} (pool {h.pool}) holds {h.unsettled} server(s) that may "
                f"bill; its lease is live for {h.expires_in_s:.0f} s more (its holder may still "
                "be running elsewhere)"
            )
        again_s = max(h.expires_in_s for h in held)
        raise InfrastructureError(
            f"{len(held)} live-looking lease(s) could not be taken: run `clore-run cleanup "
            f"--coordinator URL` again in {again_s:.0f} s, or with --wait"
        )
    ask.say("pool leases: nothing (more) to reap")


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


@dataclass
class _Reaping:
    pools: PostgresPools
    ledger: RentalLedger
    make_client: ClientFactory
    reaper: str
    say: Say
    cancel_unproven: bool = False  # --cancel-unproven: a person's decision, as for a ledger
    _client: CloreClient | None = None

    def client(self) -> CloreClient:
        if self._client is None:
            self._client = self.make_client()
            on_stderr(self._client)
        return self._client

    def run(self) -> list[HeldLease]:
        """Reap what can be reaped now; the live-looking leases left that hold servers."""
        from runner.backends.clore.reaper import reap, reap_proven_dead  # with a coordinator

        pools = self.pools
        unproven = self.cancel_unproven
        while any(pools.usage(n).expired_holders for n in pools.names()):
            reaped = reap(pools, self.ledger, self.client(), self.reaper, cancel_unproven=unproven)
            if not reaped:
                break
            self._said(reaped)
        held = [h for h in pools.live_leases() if h.unsettled]
        if any(liveness.state(liveness.Holder.parse(h.owner)) is False for h in held):
            dead = reap_proven_dead(pools, self.ledger, self.client(), self.reaper, unproven)
            self._said(dead)
            held = [h for h in pools.live_leases() if h.unsettled]
        left = []
        for h in held:
            holder = liveness.Holder.parse(h.owner)
            if liveness.state(holder) is True and holder is not None:
                self.say(f"left alone: {h.holder} (pool {h.pool}) is running ({holder.describe()})")
            else:
                left.append(h)
        return left

    def _said(self, reaped: list[Reaped]) -> None:
        for done in reaped:
            self.say(_reaped_line(done))
            for action in done.actions:
                if not action.resolved:  # each one that may still bill, named
                    self.say(f"  {_line(action)}")
        unproven = sum(len(d.unproven) for d in reaped)
        if unproven:
            raise InfrastructureError(
                f"{unproven} rental(s) of a dead holder left an order that may be theirs and "
                "cannot be proven: named above, not cancelled, and it may be billed",
                "if no other run uses this API key, run `clore-run cleanup --coordinator URL "
                "--cancel-unproven` to cancel them; else check them on clore.ai",
            )
        if any(not d.done for d in reaped):
            raise InfrastructureError(
                "some rentals of a dead holder are not confirmed released: run again"
            )


def _names(held: list[HeldLease]) -> str:
    return ", ".join(h.holder for h in held)


def _reaped_line(done: Reaped) -> str:
    billed = sum(done.settled.values())
    return (
        f"reaped {done.lease.holder} (pool {done.lease.pool}): {len(done.actions)} rental(s) "
        f"reconciled, {len(done.settled)} reservation(s) settled at ${billed:.2f}"
    )


def _line(action: Action) -> str:
    r = action.rental
    order = action.order_id if action.order_id is not None else "-"
    said = action.describe(with_hint=False)  # the hint is said once, under the last line
    return f"{r.run_id}/{r.job_id}  server {r.server_id}  order {order}  {said}"
