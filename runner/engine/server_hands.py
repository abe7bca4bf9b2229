"""The backend's hands on servers: each rent and release on a thread of its own, what they
report posted back to the loop, and the give-back of everything at the end.

The core decides which server to rent and which to give back; this carries it out and says so
to the person watching. Nothing here touches the core: what the backend reports goes through
`report`, which posts it to the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from runner.backends.base import NO_STAGES, Backend, StageSink
from runner.core.model import Job
from runner.core.rentals import (
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerEvent,
    ServerReleased,
)
from runner.errors import CloreRunError


class ServerHands:
    """Rents and releases on `backend`, off the loop thread."""

    def __init__(
        self,
        backend: Backend,
        report: Callable[[ServerEvent], None],
        notice: Callable[[str], None],
        rent_stages: Callable[[Job], StageSink],
    ) -> None:
        self.backend = backend
        self._report = report
        self._notice = notice
        self._rent_stages = rent_stages
        self._releasing: list[threading.Thread] = []  # servers being given back
        self._early: threading.Thread | None = None
        self._rents_said: dict[int, str] = {}  # rents under way: the job and host said
        # What the give-back could not confirm (a cancel refused, an order never found): the
        # run's reports say it too, and `clore-run cleanup` finishes it.
        self.give_back_warnings: list[str] = []

    def rent(self, cmd: RentServer, job: Job) -> None:
        """Say the rent, and start it on a thread of its own. Not joined at the end: the
        backend's shutdown cancels rents under way, and waits."""
        ahead = " ahead of its needs" if cmd.ahead else ""
        if cmd.hedge_of is not None:
            ahead = " as a hedge of a late boot"
        if cmd.warm is not None:
            ahead = " to keep warm for the next job"
        self._notice(
            f"{cmd.for_job}: renting {cmd.quote.gpu_model or 'a server'} #{cmd.quote.host}"
            f"{ahead} (${cmd.quote.usd_per_hour:.3f}/h, up to ${cmd.worst_case_usd:.2f})"
        )
        self._rents_said[cmd.server] = f"{cmd.for_job}: #{cmd.quote.host}"
        self._off_loop([], self._rent_off_loop, cmd, job)

    def rent_over(self, event: ServerEvent) -> None:
        """A rent said on screen ends: one that came to nothing says so, or its "renting"
        line would stand for a server never held (a rent given up before its create)."""
        if isinstance(event, ServerDeploying):
            return  # on its way: the rent goes on
        said = self._rents_said.pop(event.server, None)
        if said is not None and isinstance(event, RentFailed):
            self._notice(f"{said} not rented: {event.reason}")

    def release(self, cmd: ReleaseServer) -> None:
        """Give a server back, on a thread of its own."""
        self._releasing = self._off_loop(self._releasing, self._release_off_loop, cmd)

    def give_back_early(self) -> None:
        """A cancelled run: the backend starts giving everything back at once, beside the
        attempts' kills, so that all of it fits in the time CI allows between SIGINT and
        SIGKILL."""
        self._early = threading.Thread(target=self.shutdown_backend, daemon=True)
        self._early.start()

    def give_back(self, cancelled: bool, grace_s: float) -> None:
        """Every place back (a slow API makes this the slow part)."""
        if self._early is not None:
            self._early.join(timeout=grace_s)
        # Releases under way end first (each confirms within a bound of its own): what they
        # cost lands, and the sweep's ledger check after them sees them released. Rents under
        # way are the sweep's: it cancels them and waits for them.
        for side in self._releasing:
            side.join(timeout=grace_s if cancelled else None)
        self.shutdown_backend()

    def shutdown_backend(self) -> None:
        try:
            self.backend.shutdown()
        except CloreRunError as exc:
            # A rental left unconfirmed: said now (once: a cancelled run's give-back runs
            # twice), and kept for the run's reports.
            if str(exc) not in self.give_back_warnings:
                self.give_back_warnings.append(str(exc))
                self._notice(exc.message)  # in the one shape: what is left, then what to do
                if exc.hint:
                    self._notice(f"hint: {exc.hint}")
        except Exception as exc:
            self._notice(f"giving places back failed: {type(exc).__name__}: {exc}")

    def _rent_off_loop(self, cmd: RentServer, job: Job) -> None:
        """The rent, on its thread. An adapter that raises still answers: the core would wait
        for that server for ever (its order, if any, the provisioner cancelled on the way out,
        and the ledger keeps it for the shutdown's check)."""
        try:
            # A rent ahead is for a job still waiting for its needs: its row says that, and
            # the notice says the rent; one for a ready job is what that job is doing now.
            ahead = cmd.ahead or cmd.warm is not None
            stages = NO_STAGES if ahead else self._rent_stages(job)
            self.backend.rent(cmd, job, self._report, stages)
        except Exception as exc:
            self._report(RentFailed(cmd.server, f"internal error while renting: {exc!r}"))

    def _release_off_loop(self, cmd: ReleaseServer) -> None:
        try:
            self.backend.release_server(cmd.server, cmd.reason, self._report)
        except Exception as exc:  # what is not confirmed released stays in the ledger
            self._notice(f"giving server {cmd.server} back failed: {exc!r}")
            self._report(ServerReleased(cmd.server))

    def _off_loop(
        self, threads: list[threading.Thread], fn: Callable[..., None], *args: Any
    ) -> list[threading.Thread]:
        """Start `fn(*args)` on a thread of its own; the live ones of `threads`, and it."""
        thread = threading.Thread(target=fn, args=args, daemon=True)
        thread.start()
        return [*(t for t in threads if t.is_alive()), thread]
