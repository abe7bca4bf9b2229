"""`--backend clore`: servers rented on the Clore.ai marketplace, given back on every exit.

The registry that lists this spec is loaded by every run: each function loads the Clore wiring
(requests, the reply models, the ledger's reconciliation) only when it is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner.backends.clore.settings import KEYS
from runner.backends.runner_host import RunnerHost, RunnerHosting, RunnerHostTools
from runner.backends.spec import BackendSpec, CleanupAsk, Reconcile, Say, Setup, Waits

if TYPE_CHECKING:  # the backend's types load with the backend
    from runner.backends.base import Backend
    from runner.core.model import Pipeline


def _build(setup: Setup) -> Backend:
    from runner.backends.clore import wiring  # Clore's libraries: only for a clore run

    return wiring.build(setup)


def _restart(setup: Setup) -> Reconcile:
    from runner.backends.clore import wiring  # Clore's libraries: only for a clore serve

    return wiring.restart(setup)


def _plan(pipeline: Pipeline, result: dict[str, Any]) -> tuple[str, bool]:
    from runner.backends.clore import wiring  # Clore's libraries: only for plan --backend clore

    return wiring.plan(pipeline, result)


def _waits(backend: Backend, say: Say) -> Waits:
    from runner.backends.clore import wiring  # loaded already: _build made the backend

    return wiring.waits(backend, say)


def _exit_hint(reasons: Sequence[str]) -> str:
    from runner.backends.clore import exit_hints  # only a run that exits 3 reads it

    return exit_hints.exit_hint(reasons)


def _cleanup(ask: CleanupAsk) -> None:
    from runner.backends.clore import sweep  # Clore's libraries: only for `clore-run cleanup`

    sweep.cleanup(ask)


def _client() -> Any:
    from runner.backends.clore.api import CloreClient  # requests: only for a runner command

    return CloreClient.from_env()


def _options() -> Any:
    from runner.backends.clore.rental import ProvisionOptions  # only for `runner start`

    return ProvisionOptions()


def _runner_host(tools: RunnerHostTools) -> RunnerHost:
    from runner.backends.clore import runner_host  # Clore's libraries: only for `runner start`

    return runner_host.build(tools)


SPEC = BackendSpec(
    name="clore",
    summary="servers rented on the Clore.ai marketplace; needs CLORE_API_KEY",
    rents=True,
    flags=("--ledger FILE|URL", "--pool NAME", "--coordinator URL"),
    build=_build,
    restart=_restart,
    plan=_plan,
    waits=_waits,
    cleanup=_cleanup,
    keys=KEYS,
    exit_hint=_exit_hint,
    runner_host=RunnerHosting(client=_client, options=_options, build=_runner_host),
)
