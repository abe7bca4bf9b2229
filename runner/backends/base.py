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
from typing import Literal, Protocol, runtime_checkable

from runner.core.model import FailureKind, Job, Provisioning
from runner.core.rentals import RentServer, ServerEvent
from runner.core.servers import ServerBook

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

    def server_book(
        self,
        jobs: Sequence[Job],
        cap: int,
        budget_usd: float | None,
        provisioning: Provisioning,
        durations_s: Mapping[str, float],
    ) -> ServerBook:
        """The book for a run of `jobs`: this backend's market, or its fixed servers."""
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

    def attempt_done(self, place: Place) -> None:
        """The attempt on `place` ended: what it cost lands in its facts; the server stays."""
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


@runtime_checkable
class HandsOver(Protocol):
    """A backend whose servers run one job after another and can check, between two, that the
    first left nothing behind (runner/backends/ssh/handover.py). `handover_mark` is the
    `NAME=token` every job of this queue instance carries in its environment (None: no check,
    as in a run, whose jobs are one pipeline's)."""

    handover_mark: str | None
