"""The backend a queue server runs on (runner.backends.registry), and the pool seat it rents
under. How a restart reconciles what a dead server left is each backend's `restart`:

- local: processes marked with the dead instance's token are killed
  (runner/backends/local_orphans.py);
- clore: the dead instance's rentals (its token is their run id in the ledger) are reconciled
  with `my_orders` and cancelled, as `clore-run cleanup` does;
- ssh: a remote job cannot be re-attached; the record says it may run on until its timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import Backend, RentingBackend
from runner.backends.registry import backend_spec
from runner.backends.spec import Reconcile, Setup
from runner.core.model import Pipeline

if TYPE_CHECKING:
    from runner.stores.pools.seat import PoolSeat


@dataclass(frozen=True)
class BackendChoice:
    name: str  # a name in runner.backends.registry
    ssh_hosts: Sequence[str] = ()
    identity: Path | None = None
    ledger: Path | str = Path(".clore-run/ledger.db")  # a file, or a postgresql:// URL
    pool: str | None = None  # a budget pool on the coordinator that every rental reserves from
    coordinator: str | None = None
    cancel_unproven: bool = False  # a restart cancels orders that may be ours, none proven


def build(choice: BackendChoice, instance: str) -> tuple[Backend, Reconcile]:
    """The backend, and its restart reconcile (made now: it may read the environment's key,
    which leaves the environment before jobs run). The server's --concurrency is not the
    backend's: the core holds it (runner.serve.service)."""
    spec = backend_spec(choice.name)
    setup = Setup(
        Pipeline(name="serve", jobs=()),  # a queue has no file: each backend's keys default
        instance,
        hosts=tuple(choice.ssh_hosts),
        identity=choice.identity,
        ledger=choice.ledger,
        pool=choice.pool,
        coordinator=choice.coordinator,
        cancel_unproven=choice.cancel_unproven,
    )
    backend = spec.build(setup)
    return backend, spec.restart(setup)


def pool_seat(backend: Backend) -> PoolSeat | None:
    """The budget pool seat the backend rents under, if it joined one (--pool): a shared
    queue claims each job with a server slot of that pool (runner/stores/queue/postgres.py)."""
    return backend.pool_seat() if isinstance(backend, RentingBackend) else None
