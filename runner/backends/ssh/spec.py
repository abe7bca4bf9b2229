"""`--backend ssh`: jobs on your own hosts over SSH, one at a time per host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.backends.spec import BackendSpec, Reconcile, Setup
from runner.errors import UsageError

if TYPE_CHECKING:  # the backend's types load with the backend
    from runner.backends.base import Backend


def _build(setup: Setup) -> Backend:
    from runner.backends.ssh.backend import SshBackend  # paramiko: only when jobs go over SSH

    hosts = list(setup.hosts or setup.pipeline.hosts)
    if not hosts:
        raise UsageError(
            "--backend ssh needs hosts", "pass --ssh-host root@HOST[:PORT] or set `hosts:`"
        )
    return SshBackend.from_flags(hosts, setup.identity)


def _restart(setup: Setup) -> Reconcile:
    def note(tokens: set[str]) -> str:
        return "it may still run on its host until its timeout (SSH jobs cannot be re-attached)"

    return note


SPEC = BackendSpec(
    name="ssh",
    summary="your own hosts over SSH, one job at a time per host",
    rents=False,
    flags=("--ssh-host USER@HOST[:PORT]", "--identity FILE"),
    build=_build,
    restart=_restart,
)
