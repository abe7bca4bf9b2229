"""The one Protocol every backend implements, and the data that crosses it.

A backend has servers (a local working slot, an SSH host, a rented server) that the core
places jobs on; it makes a server the *place* of one attempt, runs the attempt there with live
output, and says when the attempt is done. The driver calls these from worker threads;
`shutdown` is called on every exit path and must release everything held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from runner.core.book_offer import BookOffer
from runner.core.model import FailureKind, Job
from runner.core.rentals import RentServer, ServerEvent

if TYPE_CHECKING:  # psycopg is an extra: only a backend that joined a pool holds a seat
    from runner.stores.pools.seat import PoolSeat

Stream = Literal["stdout", "stderr"]
# What a place is doing for an attempt, as a backend reports it: the live view shows it per job.
BackendStage = Literal["renting", "booting", "connecting", "uploading", "running", "fetching"]


class OutputSink(Protocol):
    """Receives a job's output as it arrives. Bytes, because job output need not be UTF-8."""

    def write(self, stream: Stream, data: bytes) -> None: ...


class StageSink(Protocol):
    """Hears what an attempt is waiting for while a backend rents, places and runs it.

    `stage`: a new stage began (`detail`: the offer, the host...; `usd_per_hour`: when the
    attempt starts costing money at that rate). `note`: a reason in words, where it happens
    ("sshd never answered on ...; trying the next offer")."""

    def stage(
        self, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None: ...

    def note(self, text: str) -> None: ...


class _NoStages:
    def stage(
        self, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None:
        return None

    def note(self, text: str) -> None:
        return None


NO_STAGES: StageSink = _NoStages()  # for callers nobody watches


@dataclass
class Place:
    """Somewhere a job can run. `facts` land in reports (GPU, price, host key fingerprint...)."""

    name: str
    facts: dict[str, str] = field(default_factory=dict)
    usd_per_hour: float = 0.0
    # What the job's log and the console should say about getting this place (hosts that
    # failed before it, fee rates assumed...): the attempt runner writes them out.
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunRequest:
    """Everything a backend needs to run one attempt of a job."""

    job: Job
    attempt: int
    env: Mapping[str, str]  # pipeline env + job env + CLORE_RUN_JOB / CLORE_RUN_ATTEMPT
    workspace_root: Path | None  # where the workspace files come from; None: no workspace
    workspace_files: tuple[str, ...]  # relative paths under workspace_root to copy/upload
    artifacts_dir: Path  # OUT/artifacts/<job id>/ : artifacts and the job's junit land here
    timeout_s: float


@dataclass(frozen=True)
class RunOutcome:
    """How an attempt ended. `failure` None means the script exited 0."""

    exit_code: int | None
    failure: FailureKind | None
    message: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptBill:
    """What one attempt cost, as the backend that rented its server billed it: its share of
    the rental since the server's last bill (renter fee and any creation fee included)."""

    usd: float


@dataclass(frozen=True)
class GivenBack:
    """A rented server the run gave back, as the run's end names it."""

    label: str  # the GPUs and the server: `RTX 4090 #88028`
    cost_usd: float | None  # the order's cost as the provider billed it; None: not known


@dataclass(frozen=True)
class Unproven:
    """An order a create may have made that could not be proven ours: left running."""

    what: str  # what happened, naming the order
    hint: str  # what to do about it


ServerReport = Callable[[ServerEvent], None]  # how a backend tells the core of a server


class Backend(Protocol):
    """Where jobs run (local, ssh, clore), as the core's adapter: the core decides which server
    to rent, which job runs on which, when one is given back; the backend carries those
    decisions out and says what happened, and decides nothing about money or machines itself.
    A backend whose servers already exist (SSH hosts, local slots) gives a book of fixed
    servers (runner/backends/fixed.py): the core places jobs on them by the same rules, and
    never rents. `rent` and `release_server` block (the driver calls them off its loop);
    `place` and `run` block on the attempt's worker; every other call is quick."""

    name: str

    def capacity(self) -> int | None:
        """How many jobs may run at once on this backend (None: no limit of its own)."""
        ...

    def book_offer(self, jobs: Sequence[Job], cap: int) -> BookOffer:
        """What the core builds its book of servers from, for `jobs` at most `cap` at once:
        this backend's market, or its fixed servers (the book numbers those 1, 2, ... in the
        order offered)."""
        ...

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        """Rent `cmd.quote` as server `cmd.server`, for `job`, and report exactly one
        ServerReady (it answers SSH) or RentFailed (nothing is held), and before it at most
        one ServerDeploying (online, its image pulling: alive). `stages` hears the
        rent's stages (renting, booting, connecting) for the job it is meant for."""
        ...

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        """Server `server` (ready) as the place of `job`'s next attempt. May block (an SSH
        host connects on first use), honouring `cancel`; raises InfrastructureError when the
        server cannot take it (then `lost` says whether it is gone for good)."""
        ...

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        """Run one attempt; honour `cancel` and `request.timeout_s` by killing the whole job."""
        ...

    def attempt_done(self, place: Place) -> AttemptBill | None:
        """The attempt on `place` ended; the server stays. Its bill, from a backend that
        bills its servers itself; None: the attempt cost the place's hourly price over its
        time."""
        ...

    def lost(self, server: int) -> bool:
        """Did the attempt that just ended on `server` find it gone (outbid, unreachable)?"""
        ...

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        """Give server `server` back and report ServerReleased."""
        ...

    def shutdown(self) -> None:
        """Release everything still held. Called on every exit path, signals included."""
        ...


@runtime_checkable
class RentingBackend(Protocol):
    """A backend that holds rented servers between jobs: it reports what they cost with no
    job on them (the core decides which are kept)."""

    def idle_cost_usd(self) -> float: ...

    def stop_soon(self) -> None:
        """The run is being stopped (a signal): the give-back must fit in CI's grace."""
        ...

    def given_back(self) -> Sequence[GivenBack]:
        """The servers rented and given back so far, in the order they went back."""
        ...

    def unproven_orders(self) -> Sequence[Unproven]:
        """Orders this run's creates may have made, not proven ours, left running: the run
        names them at its end and exits 3."""
        ...

    def pool_seat(self) -> PoolSeat | None:
        """The budget pool seat it rents under, if it joined one (--pool)."""
        ...


@runtime_checkable
class ChecksAccess(Protocol):
    """A backend whose account can be checked before any job waits on it: a long-lived
    `serve` says a refused key when it starts, not at its first job's failure."""

    def check_access(self) -> str | None:
        """Raise InfrastructureError if the account refuses this key. A service out of reach
        may come back: that is returned as a warning to say (None: all is well)."""
        ...


@runtime_checkable
class HandsOff(Protocol):
    """A renting backend whose servers can leave the run with their orders live, for what
    lives on them past the run (a GitHub runner, `runner start`): the run never gives such a
    server back, and the core's budget keeps counting its worst case for the job."""

    def hand_off(self, place: Place, server: int, job: Job) -> None:
        """The server `place` is on (server `server`, running `job`) leaves the run. Raises
        InfrastructureError when it is no longer held."""
        ...


@runtime_checkable
class HandsOver(Protocol):
    """A backend whose servers run one job after another and can check, between two, that the
    first left nothing behind (runner/backends/ssh/handover.py). `handover_mark` is the
    `NAME=token` every job of this queue instance carries in its environment (None: no check,
    as in a run, whose jobs are one pipeline's)."""

    handover_mark: str | None
