"""Every backend by its `--backend` name: adding one is its folder and one line here.

`run`, `serve` and `plan` take their choices from this dict, and the action's docs are checked
against it (tests/backends/test_registry.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from runner.backends import local_spec
from runner.backends.clore import spec as clore
from runner.backends.spec import BackendSpec, PipelineKey
from runner.backends.ssh import spec as ssh
from runner.errors import UsageError, did_you_mean

if TYPE_CHECKING:
    from runner.backends.runner_host import RunnerHosting
    from runner.core.model import Pipeline

BACKENDS: dict[str, BackendSpec] = {
    "clore": clore.SPEC,
    "local": local_spec.SPEC,
    "ssh": ssh.SPEC,
}

# Without --backend: this one when its key is set (CLORE_API_KEY), else the free one.
DEFAULT_BACKEND = "clore"
_WITHOUT_KEY = "local"


def default_backend() -> BackendSpec:
    return BACKENDS[DEFAULT_BACKEND if os.environ.get("CLORE_API_KEY") else _WITHOUT_KEY]


def renting_backends() -> list[str]:
    """The backends that rent servers: --pool and --ledger are theirs."""
    return [name for name, spec in BACKENDS.items() if spec.rents]


def backend_spec(name: str, flag: str = "--backend") -> BackendSpec:
    """The spec named `name`, or a UsageError that names the choices."""
    spec = BACKENDS.get(name)
    if spec is None:
        choices = ", ".join(BACKENDS)
        hint = did_you_mean(name, list(BACKENDS)) or f"one of {choices}"
        raise UsageError(f"{flag} {name}: no such backend (backends: {choices})", hint)
    return spec


def runner_hosting(name: str, flag: str = "--backend") -> RunnerHosting:
    """The runner host of the backend named `name`, or a UsageError that names the backends
    that can host runners."""
    hosting = backend_spec(name, flag).runner_host
    if hosting is None:
        can = [n for n, spec in BACKENDS.items() if spec.runner_host is not None]
        raise UsageError(
            f"{flag} {name}: this backend cannot host GitHub runners "
            f"(backends that can: {', '.join(can)})",
            f"pass {flag} {can[0]}",
        )
    return hosting


def described() -> str:
    """The backends as the action's docs list them (action.yml's `backend` input, README)."""
    named = [f"{name} ({spec.summary})" for name, spec in BACKENDS.items()]
    return "Where jobs run: " + ", ".join(named[:-1]) + f" or {named[-1]}."


def pipeline_keys(level: str) -> tuple[PipelineKey, ...]:
    """The backends' own keys of the pipeline file at `level` ("pipeline": the top level;
    "job": a job's and `defaults:`), in the registry's order: the file's models accept them."""
    return tuple(key for spec in BACKENDS.values() for key in spec.keys if key.level == level)


def pipeline_key_values(pipeline: Pipeline) -> dict[str, str | None]:
    """The backends' top-level keys as a run uses them: the file's value, else the default
    (plan shows them)."""
    return {k.name: pipeline.backend_keys.get(k.name, k.default) for k in pipeline_keys("pipeline")}
