"""`clore-run runner stop`: remove what `start` made, from its record alone.

Per runner, money first: the registration is looked at and removed when the runner never took a
job (a JIT runner that ran its job has removed itself), then the order is proven ours and
cancelled by the backend that hosted it (`RunnerHosting.release`). A registration that cannot
be looked at (no token, no right) does not stop the cancel: it is said, and GitHub drops an
unused JIT registration by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runner.backends.runner_record import Released, RunnerRecord, RunnerRental
from runner.errors import InfrastructureError
from runner.gh_runner.github import RunnerApi, Scope

ApiFor = Callable[[Scope], RunnerApi]


@dataclass(frozen=True)
class Stopped:
    released: Released
    registration: str  # what became of the runner's registration, in words

    @property
    def rental(self) -> RunnerRental:
        return self.released.rental


def stop_runners(
    record: RunnerRecord,
    give_back: Callable[[RunnerRental], Released],
    api_for: ApiFor | None,
    scope: Scope | None = None,
) -> list[Stopped]:
    """Deregister and give back every runner of `record`, in its order (`give_back`: the
    backend's, proving the order ours from the record alone). `scope`: where this
    stop may remove registrations (the repository it runs for); a record naming another is
    not followed there (the order is still cancelled: that takes the proof, not the scope)."""
    stopped = []
    for rental in record.runners:
        words = _deregister(rental, api_for, scope)
        stopped.append(Stopped(give_back(rental), words))
    return stopped


def _deregister(rental: RunnerRental, api_for: ApiFor | None, scope: Scope | None) -> str:
    if api_for is None:
        return "not checked (no runner token given)"
    # The record is pasted text: its scope must not aim the runner token at a repository or
    # organization other than the one this stop is for.
    if scope is None:
        return "not checked (which repository? pass --repo or --org, or run in Actions)"
    if rental.scope != scope.path:
        return f"not touched: the record names {rental.scope}, this stop is for {scope.path}"
    try:
        api = api_for(Scope(rental.scope))
        state = api.get_runner(rental.runner_id)
        if state is None:
            return "gone: it ran its job and removed itself"
        if state.busy:
            return "still running a job: its server was cancelled under it"
        api.delete_runner(rental.runner_id)
    except InfrastructureError as exc:
        return f"not removed: {exc}"
    return f"removed: it never took a job ({state.status or 'status unknown'})"
