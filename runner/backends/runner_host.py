"""What a backend owes `clore-run runner start` to host GitHub runners (`BackendSpec.
runner_host`): rent a server per runner through the driver, as `run` rents for a job, then hand
each over to its runner, so the run's end does not give it back.

runner/gh_runner/ sits above the backends: it registers the runners, drives their jobs and
installs each runner over SSH, and reaches the backend only through these types (the registry
names the backend; tests inject fakes through `RunnerHostTools`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.core.hedge import HedgePolicy

if TYPE_CHECKING:
    from runner.backends.base import Backend, Place
    from runner.backends.ssh.connection import SshConnection
    from runner.backends.ssh.keys import ClientKey, HostKeyStore
    from runner.clock import Clock
    from runner.core.model import Job
    from runner.stores.ledger import RentalLedger
    from runner.stores.pools.seat import PoolSeat

Say = Callable[[str], None]


@dataclass(frozen=True)
class RunnerHostTools:
    """What a runner host rents with, injected: tests pass a fake marketplace's client and a
    fake clock."""

    client: Any  # the backend's API client (RunnerHosting.client, or a stand-in)
    clock: Clock
    ledger: RentalLedger
    ledger_path: Path | str  # where the ledger is: the host history and the API limits beside it
    run_id: str
    key: ClientKey
    host_keys: HostKeyStore
    currency: str
    options: Any  # the backend's provisioning options (RunnerHosting.options, or a test's)
    hedge: HedgePolicy = field(default_factory=HedgePolicy)  # hedged boots, as `run` has them


@dataclass(frozen=True)
class Held:
    """A server a runner's job was placed on, for the install over SSH."""

    conn: SshConnection
    held_since: float  # unix seconds: the runner's cap counts from here


@dataclass(frozen=True)
class HandedServer:
    """A server handed over to its runner: what `runner stop` and the reaper need of it."""

    order_id: int
    server_id: int
    held_since: float  # unix seconds
    currency: str
    spot: bool
    usd_per_unit: float
    fee_rate: float
    creation_fee_native: float
    usd_per_hour: float
    gpus: str
    reservation_id: int | None  # its worst case in the pool (`--pool`), if any


class RunnerHost(Protocol):
    """One `runner start`'s renting: built per start, closed on every exit."""

    @property
    def backend(self) -> Backend:
        """What the driver rents and places the runners' jobs with."""
        ...

    @property
    def boot_bound_s(self) -> float:
        """The longest a boot is waited for (a pool lease outlives the runners by it)."""
        ...

    def join(self, seat: PoolSeat | None) -> None:
        """Every rent reserves its worst case in this pool (`--pool`) before its create."""

    def check_offers(self, job: Job, runners: int) -> None:
        """Refuse (JobCannotRun) before anything is registered: fewer fitting offers than
        runners for `job` (a runner's job: its ask, image and max-minutes)."""

    def check_budget(self, job: Job, runners: int, budget_usd: float | None) -> None:
        """Refuse (JobCannotRun) before anything is rented: a budget the best offers (of
        `check_offers`) cannot fit, each runner's worst case counted."""

    def stop_soon(self) -> None:
        """A signal: stop waiting on boots and the API."""

    def held(self, place: Place) -> Held:
        """The server `place` is on (InfrastructureError once it is no longer held)."""
        ...

    def hand_over(self, place: Place, server: int, job: Job) -> HandedServer:
        """The server leaves the run with its order live; its SSH link is closed."""
        ...

    def give_back_handed(self, say: Say) -> None:
        """The start is not whole: give back the servers handed over so far (the driver's
        end gives back the rest)."""

    def keep_seat(self) -> PoolSeat | None:
        """The start is whole: the pool seat leaves the backend (its reservations go on with
        the runners' servers), for the start to stop its keeper."""
        ...

    def close(self) -> None:
        """On an error: leave the pool, close the host history (idempotent)."""


@dataclass(frozen=True)
class RunnerHosting:
    """A backend that can host runners: its API client and provisioning defaults (each
    replaced by a test's stand-in), and the host built from them per start."""

    client: Callable[[], Any]  # from the environment: a missing key fails here, before all else
    options: Callable[[], Any]
    build: Callable[[RunnerHostTools], RunnerHost]
