"""`--backend clore` wired from the command line's flags (runner.backends.clore.spec): the
backend, serve's restart reconcile, plan's offers and run's API waits."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

from runner.backends.base import Backend
from runner.backends.clore import factory
from runner.backends.clore.api import CloreClient
from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.cleanup import Action, reconcile
from runner.backends.clore.fees import read_fee_schedule
from runner.backends.clore.market import offers_from_servers
from runner.backends.clore.plan_offers import plan_offers, render_offers
from runner.backends.clore.reaper import reap_holder
from runner.backends.clore.settings import CloreSettings
from runner.backends.clore.waits import ApiWaits, on_stderr
from runner.backends.spec import Reconcile, Say, Setup, Waits
from runner.core.model import Pipeline
from runner.stores.hosts import hosts_target, read_memory
from runner.stores.ledger import DEFAULT_PATH, RentalLedger, open_ledger
from runner.stores.target import coordinator_from, ledger_target

log = logging.getLogger(__name__)


def where(setup: Setup) -> tuple[Path | str, str | None]:
    """The ledger (a file or a URL) and the coordinator, from the flags and the environment."""
    shared = coordinator_from(setup.coordinator)
    return ledger_target(setup.ledger, shared, DEFAULT_PATH), shared


def build(setup: Setup) -> Backend:
    ledger, shared = where(setup)
    return factory.clore_backend(
        setup.pipeline, ledger, setup.run_id, pool=setup.pool, coordinator=shared
    )


def restart(setup: Setup) -> Reconcile:
    ledger_at, shared = where(setup)
    client = CloreClient.from_env()  # built now: the key leaves the environment before jobs run
    on_purpose = setup.cancel_unproven

    def cancel_rentals(tokens: set[str]) -> str:
        actions: list[Action] = []
        with open_ledger(ledger_at) as ledger:
            for token in sorted(tokens):
                if setup.pool is not None and shared is not None:
                    actions += _reap_pool_holder(
                        shared, ledger, client, token, setup.run_id, on_purpose
                    )
                    continue
                actions += reconcile(
                    ledger, client, dry_run=False, run_id=token, cancel_unproven=on_purpose
                )
        return _restart_note(actions)

    return cancel_rentals


def _restart_note(actions: list[Action]) -> str:
    """What a restart's reconcile came to, in one line for the jobs it recovers. Each order
    that may be a dead instance's, none proven, is never dropped silently: it is named in
    serve's log, with the command that cancels it on purpose, and counted here."""
    unproven = [a for a in actions if a.kind == "unproven"]
    for action in unproven:
        run = action.rental.run_id
        log.warning(
            "restart: rental %s/%s on server %s: %s; it may be billed: if no other run uses "
            "this API key, `clore-run cleanup --run %s --cancel-unproven` (or serve "
            "--cancel-unproven) cancels it",
            run,
            action.rental.job_id,
            action.rental.server_id,
            action.describe(),
            run,
        )
    failed = sum(not a.resolved for a in actions) - len(unproven)
    notes = []
    if unproven:
        servers = ", ".join(str(a.rental.server_id) for a in unproven)
        notes.append(
            f"{len(unproven)} rental(s) left an order that may be ours and cannot be proven "
            f"(servers {servers}): named in serve's log, not cancelled"
        )
    if failed:
        notes.append(f"{failed} rental(s) could not be cancelled: run `clore-run cleanup`")
    return "; ".join(notes) or "its rental was reconciled with the ledger and cancelled"


def _reap_pool_holder(
    coordinator: str,
    ledger: RentalLedger,
    client: CloreClient,
    token: str,
    instance: str,
    cancel_unproven: bool = False,
) -> list[Action]:
    """A dead instance's pool lease, taken now (its queue lease was): its rentals cancelled
    through the ledger and its reservations settled at what they were billed, so its servers
    and money go back to the pool at once, not when its pool lease runs out and a
    `clore-run cleanup --coordinator` reaps it. What was done with each rental."""
    from runner.stores.pools.postgres import PostgresPools  # psycopg: the postgres extra, if used

    with PostgresPools(coordinator) as pools:
        reaped = reap_holder(pools, ledger, client, token, f"serve {instance}", cancel_unproven)
    if reaped is None:  # it held no pool lease: its rentals, as without a pool
        return reconcile(
            ledger, client, dry_run=False, run_id=token, cancel_unproven=cancel_unproven
        )
    return reaped.actions


def plan(pipeline: Pipeline, result: dict[str, Any]) -> tuple[str, bool]:
    """Today's offer for each job and the run simulated on them, put in `result`; their text,
    and whether some job fits no offer."""
    client = CloreClient.from_env()
    on_stderr(client)
    # The account's fee rates, read once as `run` reads them (documented ones if not).
    currency = CloreSettings.of(pipeline).currency
    fees = read_fee_schedule(client, currency)
    servers = client.marketplace().servers
    offers = offers_from_servers(servers, currency, fees=fees.rates)
    memory, note = read_memory(hosts_target(where(Setup(pipeline, "plan"))[0]))
    result["clore"] = plan_offers(pipeline, offers, fees, memory)
    if note:
        result["clore"]["summary"] += f"\n{note}"
    # The run simulated on these offers, at the top where a reader of the plan looks first.
    result["makespan"] = result["clore"]["makespan"]
    result["cost"] = result["clore"]["cost"]
    result["prediction_unavailable"] = result["clore"]["prediction_unavailable"]
    return render_offers(result["clore"]), bool(result["clore"]["unfit"])


def waits(backend: Backend, say: Say) -> Waits:
    return ApiWaits.attach(cast("CloreBackend", backend).client, say)  # what _build made
