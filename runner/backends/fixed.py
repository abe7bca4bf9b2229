"""The part of the core's server model every backend with servers that already exist shares.

SSH hosts and local working slots are servers the run holds from its start: the core places
jobs on them by the same rules as on rented ones (a finished server takes the job that needs
the one that just ran there, whose files are warm), but never rents one, and lets them go only
when the run ends. A backend mixes this in and says which servers it has (`fixed_servers`);
it keeps `place`, `run`, `attempt_done` and `lost` for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from runner.backends.base import (
    NO_STAGES,
    Backend,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    ServerAdapter,
    ServerReport,
    StageSink,
)
from runner.core.model import Job, Provisioning
from runner.core.rentals import Quote, RentFailed, RentServer, ServerReleased
from runner.core.servers import ServerBook


class FixedServers:
    """`server_book`, `rent` and `release_server` of a backend that rents nothing.

    Server ids are the book's: 1, 2, ... in the order `fixed_servers` gives them; `_names`
    maps each to the name it was given."""

    _names: dict[int, str]

    def fixed_servers(self, cap: int) -> Sequence[str]:
        """The servers a run of concurrency `cap` holds, by name (unique)."""
        raise NotImplementedError

    def server_book(
        self,
        jobs: Sequence[Job],
        cap: int,
        budget_usd: float | None,
        provisioning: Provisioning,
        durations_s: Mapping[str, float],
    ) -> ServerBook:
        """Every fixed server, ready from the start; `cap` jobs at most run at once. Budget
        and provisioning do not apply: nothing is rented."""
        names = list(self.fixed_servers(cap))
        book = ServerBook(jobs, cap, fixed_hosts=[Quote(name) for name in names])
        self._names = {view.id: view.quote.host for view in book.servers()}
        return book

    def server_name(self, server: int) -> str:
        return self._names[server]

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        """A book of fixed servers rents nothing: were it asked to, nothing is held."""
        report(RentFailed(cmd.server, "this backend rents no servers", fatal=True))

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        """A fixed server is let go, not given back: the backend's shutdown closes it."""
        report(ServerReleased(server, 0.0))


class FixedSlots(FixedServers):
    """Any backend that hands out places (`acquire`/`release`) as the core's adapter: `cap`
    slots that already exist, each a place acquired for one attempt and released after it.
    The driver runs every backend through the core this way; a backend that knows its
    servers (Clore, SSH, local) is an adapter of its own."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def fixed_servers(self, cap: int) -> Sequence[str]:
        return [f"slot-{n}" for n in range(1, cap + 1)]

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        return self.backend.acquire(job, cancel, stages)

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        return self.backend.run(place, request, sink, cancel, stages)

    def attempt_done(self, place: Place) -> None:
        self.backend.release(place)

    def lost(self, server: int) -> bool:
        return False


def as_adapter(backend: Backend) -> ServerAdapter:
    """`backend` as the core's adapter: itself when it is one, else its places as slots."""
    return backend if isinstance(backend, ServerAdapter) else FixedSlots(backend)


if TYPE_CHECKING:  # let mypy hold FixedSlots to the ServerAdapter Protocol

    def _is_an_adapter(slots: FixedSlots) -> ServerAdapter:
        return slots
