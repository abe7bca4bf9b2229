"""`--backend clore`: servers rented on the Clore.ai marketplace, given back on every exit.

Everything Clore (requests, the reply models, the ledger's reconciliation) is imported inside
the functions: the registry that lists this spec is loaded by every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from runner.backends.base import Backend
from runner.backends.spec import BackendSpec, Reconcile, Say, Setup, Waits

if TYPE_CHECKING:
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.backend import CloreBackend
    from runner.core.model import Pipeline
    from runner.stores.ledger import RentalLedger


def _where(setup: Setup) -> tuple[Path | str, str | None]:
    """The ledger (a file or a URL) and the coordinator, from the flags and the environment."""
    from runner.ledger import DEFAULT_PATH
    from runner.stores.target import coordinator_from, ledger_target

    shared = coordinator_from(setup.coordinator)
    return ledger_target(setup.ledger, shared, DEFAULT_PATH), shared


def _build(setup: Setup) -> Backend:
    from runner.backends.clore.factory import clore_backend

    ledger, shared = _where(setup)
    return clore_backend(setup.pipeline, ledger, setup.run_id, pool=setup.pool, coordinator=shared)


def _restart(setup: Setup) -> Reconcile:
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.cleanup import reconcile
    from runner.stores.ledger import open_ledger

    ledger_at, shared = _where(setup)
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
    from runner.backends.clore.cleanup import reconcile
    from runner.stores.pg_pools import PostgresPools
    from runner.stores.reaper import reap_holder

    with PostgresPools(coordinator) as pools:
        reaped = reap_holder(pools, ledger, client, token, f"serve {instance}")
    if reaped is None:  # it held no pool lease: its rentals, as without a pool
        actions = reconcile(ledger, client, dry_run=False, run_id=token)
        return sum(not a.resolved for a in actions)
    return sum(not a.resolved for a in reaped.actions)


def _plan(pipeline: Pipeline, result: dict[str, Any]) -> tuple[str, bool]:
    """Today's offer for each job and the run simulated on them, put in `result`; their text,
    and whether some job fits no offer."""
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.fees import read_fee_schedule
    from runner.backends.clore.market import offers_from_servers
    from runner.backends.clore.plan_offers import plan_offers, render_offers
    from runner.backends.clore.waits import on_stderr
    from runner.stores.hosts import hosts_target, read_memory

    client = CloreClient.from_env()
    on_stderr(client)
    # The account's fee rates, read once as `run` reads them (documented ones if not).
    fees = read_fee_schedule(client, pipeline.currency)
    servers = client.marketplace().servers
    offers = offers_from_servers(servers, pipeline.currency, fees=fees.rates)
    memory, note = read_memory(hosts_target(_where(Setup(pipeline, "plan"))[0]))
    result["clore"] = plan_offers(pipeline, offers, fees, memory)
    if note:
        result["clore"]["summary"] += f"\n{note}"
    # The run simulated on these offers, at the top where a reader of the plan looks first.
    result["makespan"] = result["clore"]["makespan"]
    result["cost"] = result["clore"]["cost"]
    return render_offers(result["clore"]), bool(result["clore"]["unfit"])


def _waits(backend: Backend, say: Say) -> Waits:
    from runner.backends.clore.waits import ApiWaits

    return ApiWaits.attach(cast("CloreBackend", backend).client, say)  # what _build made


SPEC = BackendSpec(
    name="clore",
    summary="servers rented on the Clore.ai marketplace; needs CLORE_API_KEY",
    rents=True,
    flags=("--ledger FILE|URL", "--pool NAME", "--coordinator URL"),
    build=_build,
    restart=_restart,
    plan=_plan,
    waits=_waits,
)
