"""`--backend local`: jobs run on this machine, free; a restart kills what a dead server left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.backends.spec import BackendSpec, Reconcile, Setup

if TYPE_CHECKING:  # the backend's types load with the backend
    from runner.backends.base import Backend


def _build(setup: Setup) -> Backend:
    # a backend loads when built: the registry loads with every command
    from runner.backends.local import LocalBackend

    return LocalBackend()


def _restart(setup: Setup) -> Reconcile:
    def kill_orphans(tokens: set[str]) -> str:
        # only serve's restart reconcile loads it
        from runner.backends.local_orphans import kill_orphans as kill

        groups = kill(tokens)
        if not groups:
            return "no process of it was left"
        return f"its processes were killed at restart (groups {', '.join(map(str, groups))})"

    return kill_orphans


SPEC = BackendSpec(
    name="local",
    summary="the machine it runs on, free",
    rents=False,
    flags=(),
    build=_build,
    restart=_restart,
)
