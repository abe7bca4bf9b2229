"""The backend a queue server runs on, and how a restart reconciles what a dead server left.

- local: processes marked with the dead instance's token are killed (runner/serve/orphans.py);
- clore: the dead instance's rentals (its token is their run id in the ledger) are reconciled
  with `my_orders` and cancelled, as `clore-run cleanup` does;
- ssh: a remote job cannot be re-attached; the record says it may run on until its timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import Backend
from runner.backends.clore.api import CloreClient
from runner.backends.clore.cleanup import reconcile
from runner.backends.clore.factory import clore_backend
from runner.backends.local import LocalBackend
from runner.backends.ssh.backend import SshBackend
from runner.core.model import Pipeline
from runner.errors import UsageError
from runner.serve.orphans import kill_orphans
from runner.serve.service import Reconcile
from runner.stores.ledger import RentalLedger, open_ledger

if TYPE_CHECKING:
    from runner.stores.pool_seat import PoolSeat


@dataclass(frozen=True)
class BackendChoice:
    name: str  # local | ssh | clore
    ssh_hosts: Sequence[str] = ()
    identity: Path | None = None
    ledger: Path | str = Path(".clore-run/ledger.db")  # a file, or a postgresql:// URL
    currency: str = "CLORE-Blockchain"
    pool: str | None = None  # a budget pool on the coordinator that every rental reserves from
    coordinator: str | None = None


def build(choice: BackendChoice, capacity: int, instance: str) -> tuple[Backend, Reconcile]:
    if choice.name == "clore":
        return _clore(choice, capacity, instance)
    if choice.name == "ssh":
        if not choice.ssh_hosts:
            raise UsageError("--backend ssh needs hosts", "pass --ssh-host root@HOST[:PORT]")
        return SshBackend.from_flags(list(choice.ssh_hosts), choice.identity), _ssh_note
    return LocalBackend(), _kill_local


def _kill_local(tokens: set[str]) -> str:
    groups = kill_orphans(tokens)
    if not groups:
        return "no process of it was left"
    return f"its processes were killed at restart (groups {', '.join(map(str, groups))})"


def _ssh_note(tokens: set[str]) -> str:
    return "it may still run on its host until its timeout (SSH jobs cannot be re-attached)"


def _clore(choice: BackendChoice, capacity: int, instance: str) -> tuple[Backend, Reconcile]:
    settings = Pipeline(name="serve", jobs=(), concurrency=capacity, currency=choice.currency)
    backend = clore_backend(
        settings, choice.ledger, instance, pool=choice.pool, coordinator=choice.coordinator
    )
    client = CloreClient.from_env()  # built now: the key leaves the environment before jobs run

    def cancel_rentals(tokens: set[str]) -> str:
        failed = 0
        with open_ledger(choice.ledger) as ledger:
            for token in sorted(tokens):
                if choice.pool is not None and choice.coordinator is not None:
                    failed += _reap_pool_holder(choice.coordinator, ledger, client, token, instance)
                    continue
                actions = reconcile(ledger, client, dry_run=False, run_id=token)
                failed += sum(not a.resolved for a in actions)
        if failed:
            return f"{failed} rental(s) could not be cancelled: run `clore-run cleanup`"
        return "its rental was reconciled with the ledger and cancelled"

    return backend, cancel_rentals


def _reap_pool_holder(
    coordinator: str, ledger: RentalLedger, client: CloreClient, token: str, instance: str
) -> int:
    """A dead instance's pool lease, taken now (its queue lease was): its rentals cancelled
    through the ledger and its reservations settled at what they were billed, so its servers
    and money go back to the pool at once, not when its pool lease runs out and a
    `clore-run cleanup --coordinator` reaps it. How many rentals could not be cancelled."""
    from runner.stores.pg_pools import PostgresPools
    from runner.stores.reaper import reap_holder

    with PostgresPools(coordinator) as pools:
        reaped = reap_holder(pools, ledger, client, token, f"serve {instance}")
    if reaped is None:  # it held no pool lease: its rentals, as without a pool
        actions = reconcile(ledger, client, dry_run=False, run_id=token)
        return sum(not a.resolved for a in actions)
    return sum(not a.resolved for a in reaped.actions)


def pool_seat(backend: Backend) -> PoolSeat | None:
    """The budget pool seat the backend rents under, if it joined one (--pool): a shared
    queue claims each job with a server slot of that pool (runner/stores/pg_queue.py)."""
    seat: PoolSeat | None = getattr(getattr(backend, "provisioner", None), "seat", None)
    return seat
