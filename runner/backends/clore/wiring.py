"""`--backend clore` wired from the command line's flags (runner.backends.clore.spec): the
backend, serve's restart reconcile, plan's offers and run's API waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from runner.backends.base import Backend
from runner.backends.clore import factory
from runner.backends.clore.api import CloreClient
from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.cleanup import reconcile
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

    def cancel_rentals(tokens: set[str]) -> str:
        failed = 0
        with open_ledger(ledger_at) as ledger:
            for token in sorted(tokens):
                if setup.pool is not None and shared is not None:
                    failed += _reap_pool_holder(shared, ledger, client, token, setup.run_id)
                    continue
                actions = reconcile(ledger, client, dry_run=False, run_id=token)
                failed += sum(not a.resolved for a in actions)
        if failed:
            return f"{failed} rental(s) could not be cancelled: run `clore-run cleanup`"
        return "its rental was reconciled with the ledger and cancelled"

    return cancel_rentals


def _reap_pool_holder(
    coordinator: str, ledger: RentalLedger, client: CloreClient, token: str, instance: str
) -> int:
    """A dead instance's pool lease, taken now (its queue lease was): its rentals cancelled
    through the ledger and its reservations settled at what they were billed, so its servers
    and money go back to the pool at once, not when its pool lease runs out and a
    `clore-run cleanup --coordinator` reaps it. How many rentals could not be cancelled."""
    from runner.stores.pools.postgres import PostgresPools  # psycopg: the postgres extra, if used

    with PostgresPools(coordinator) as pools:
        reaped = reap_holder(pools, ledger, client, token, f"serve {instance}")
    if reaped is None:  # it held no pool lease: its rentals, as without a pool
        actions = reconcile(ledger, client, dry_run=False, run_id=token)
        return sum(not a.resolved for a in actions)
    return sum(not a.resolved for a in reaped.actions)


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
    return render_offers(result["clore"]), bool(result["clore"]["unfit"])


def waits(backend: Backend, say: Say) -> Waits:
    return ApiWaits.attach(cast("CloreBackend", backend).client, say)  # what _build made
