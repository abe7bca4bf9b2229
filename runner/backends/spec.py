"""What a backend owes the command line: one `BackendSpec` per backend, all in one dict
(runner.backends.registry), which `run`, `serve`, `plan` and the action's docs read.

A spec module is light: it imports its backend (and paramiko, requests...) inside `build`, so
that the registry costs a local run nothing it does not use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from runner.backends.base import Backend
    from runner.backends.runner_host import RunnerHosting
    from runner.core.model import Pipeline

Say = Callable[[str], None]


class Waits(Protocol):
    """A renting backend's waits on its API (runner.backends.clore.waits.ApiWaits): each said
    as it starts (`say`, which `run` points at its console), what was given up kept for the
    reports' warnings."""

    say: Say

    @property
    def warnings(self) -> tuple[str, ...]: ...


# serve, at start: given the tokens of dead instances that left attempts open, what became of
# those attempts ("its processes were killed at restart").
Reconcile = Callable[[set[str]], str]


@dataclass(frozen=True)
class Setup:
    """What `run` and `serve` know when they build a backend: the flags as given."""

    # The file as loaded, --budget and --concurrency applied (which the core holds, not the
    # backend): `hosts:`, and the backends' own keys (`backend_keys`). serve: a stub.
    pipeline: Pipeline
    run_id: str  # the run's id; serve: the instance's token
    hosts: tuple[str, ...] = ()  # --ssh-host (run also says --host)
    identity: Path | None = None  # --identity
    ledger: str | Path | None = None  # --ledger (None: the default, or the coordinator)
    pool: str | None = None  # --pool
    coordinator: str | None = None  # --coordinator (None: $CLORE_RUN_COORDINATOR, if set)
    # serve --cancel-unproven: a restart also cancels a dead instance's orders that may be
    # its own but cannot be proven (a person's decision, for a key no other run uses).
    cancel_unproven: bool = False


@dataclass(frozen=True)
class PipelineKey:
    """A key of the pipeline file that one backend reads and no other part does (Clore's
    `currency:`). The file's models accept it where `level` says, as one of `choices`, with
    the same located errors as any key (runner/spec/models.py); the loaded pipeline carries it
    by name, as written, in `Pipeline.backend_keys` or `Job.backend_keys`, to the backend's
    own settings. The core never reads it."""

    name: str  # as written in the file
    level: Literal["pipeline", "job"]  # the top level, or a job's (and `defaults:`)
    choices: tuple[str, ...]
    description: str  # `clore-run schema` shows it to editors
    default: str | None = None  # what the run uses when the file says nothing (None: nothing)
    hint: str = ""  # said after a value not among the choices


@dataclass(frozen=True)
class CleanupAsk:
    """What `clore-run cleanup` was asked, as each renting backend's `cleanup` reads it."""

    ledger: str | None = None  # --ledger (None: the default, or the coordinator)
    coordinator: str | None = None  # --coordinator (None: $CLORE_RUN_COORDINATOR, if set)
    run_id: str | None = None  # --run: only this run's rentals
    dry_run: bool = False  # only say what would be done
    wait: bool = False  # with a coordinator: wait for live-looking leases to expire
    say: Say = print  # each line of what was done
    # A stand-in for the backend's API client (tests: a fake marketplace); None: from the
    # environment (CLORE_API_KEY ...).
    client: Callable[[], Any] | None = None
    # Also cancel orders that may be ours but cannot be proven (a person's decision, for a key
    # no other run uses): without it such an order is named and left, exit 3.
    cancel_unproven: bool = False


@dataclass(frozen=True)
class BackendSpec:
    name: str
    summary: str  # one line: `--backend`'s help and the action's docs
    rents: bool  # rents servers: a budget, --ledger, --pool and `clore-run cleanup` apply
    flags: tuple[str, ...]  # the flags of `run` and `serve` it reads, beyond the common ones
    build: Callable[[Setup], Backend]
    # serve, at start (before jobs run): how it reconciles what a dead instance left
    restart: Callable[[Setup], Reconcile]
    # `plan --backend NAME`: puts what this backend would do in the plan (offers, cost) and
    # answers its text and whether some job fits nothing. None: plan has nothing to add.
    plan: Callable[[Pipeline, dict[str, Any]], tuple[str, bool]] | None = None
    # `run`: what the backend tells of its waits on its API, attached to the backend built.
    waits: Callable[[Backend, Say], Waits] | None = None
    # Keys of the pipeline file that only this backend reads.
    keys: tuple[PipelineKey, ...] = ()
    # `clore-run cleanup`: give back what the ledger says this backend still holds (a dead
    # run's rentals); a failure is raised as a CloreRunError. None: it rents nothing.
    cleanup: Callable[[CleanupAsk], None] | None = None
    # `run` exits 3: what to do, from its errored jobs' reasons (the hint under its last line).
    # None: runner.outcome's hint for any backend.
    exit_hint: Callable[[Sequence[str]], str] | None = None
    # `clore-run runner start|stop`: rents servers for GitHub runners and hands them over
    # (runner/backends/runner_host.py). None: it cannot host runners.
    runner_host: RunnerHosting | None = None
