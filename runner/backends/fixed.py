"""The part of the core's server model every backend with servers that already exist shares.

SSH hosts and local working slots are servers the run holds from its start: the core places
jobs on them by the same rules as on rented ones (a finished server takes the job that needs
the one that just ran there, whose files are warm), but never rents one, and lets them go only
when the run ends. A backend mixes this in and says which servers it has (`fixed_servers`:
`cap` slots unless it says otherwise); it keeps `place`, `run` and `attempt_done` for itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.backends.base import NO_STAGES, ServerReport, StageSink
from runner.core.book_offer import BookOffer
from runner.core.model import Job
from runner.core.rentals import Quote, RentFailed, RentServer, ServerReleased


class FixedServers:
    """`book_offer`, `rent`, `lost` and `release_server` of a backend that rents nothing.

    Server ids are the book's: 1, 2, ... in the order `fixed_servers` gives them (the core
    numbers fixed hosts so); `_names` maps each to the name it was given."""

    _names: dict[int, str]

    def fixed_servers(self, cap: int) -> Sequence[str]:
        """The servers a run of concurrency `cap` holds, by name (unique): `cap` slots of one
        machine, unless the backend has servers of its own (hosts)."""
        return [f"slot-{n}" for n in range(1, cap + 1)]

    def book_offer(self, jobs: Sequence[Job], cap: int) -> BookOffer:
        """Every fixed server, ready from the start; `cap` jobs at most run at once. Budget
        and provisioning do not apply: nothing is rented."""
        names = list(self.fixed_servers(cap))
        self._names = dict(enumerate(names, start=1))
        return BookOffer(fixed_hosts=[Quote(name) for name in names])

    def server_name(self, server: int) -> str:
        return self._names[server]

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        """A book of fixed servers rents nothing: were it asked to, nothing is held."""
        report(RentFailed(cmd.server, "this backend rents no servers", fatal=True))

    def lost(self, server: int) -> bool:
        """A server that already exists is there for the whole run, unless the backend says
        it left one out (an SSH host that stopped answering)."""
        return False

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        """A fixed server is let go, not given back: the backend's shutdown closes it."""
        report(ServerReleased(server, 0.0))
