"""Giving servers back, pure.

Each server that fell idle, came up or lost the job it was meant for is looked at once:

- a stopping run gives back every server no job runs on;
- a rented server nobody is meant for is kept for at most one boot after it fell idle (longer,
  a new rental would cost less), and only for a job that waits and fits it, or one that will
  want it by then (a retry, or a job whose needs end by then with no other server free for
  it); else it goes back at once, as it does when keeping it would pass the budget or
  outlive the server's maximum rental length;
- a queue's server that would go back is kept warm when its warmth says so (warmth.py);
- a rented server up before the job it is meant for waits a boot's time for that job (from
  when the job is expected ready); after that the job is not coming soon, and it goes back.

Servers that already exist are kept to the end of the run.
"""

from __future__ import annotations

from runner.core.book_part import BookPart, BookState
from runner.core.ends import Ends
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import BOOTING, BUSY, EPS_S, Server
from runner.core.rental_length import outlives
from runner.core.warmth import Warmth

_AFTER_TIE_S = 1e-3


class GiveBack(BookPart):
    """Decides, for each server looked at, to keep it (and until when) or give it back."""

    def __init__(self, state: BookState, ends: Ends, warmth: Warmth) -> None:
        super().__init__(state)
        self._ends = ends
        self._warmth = warmth

    def give_back(self, now: float, stopping: bool) -> None:
        fleet = self._fleet
        look = fleet.take_look()
        if not look or (not self._renting and not stopping):
            return  # fixed hosts are kept to the end
        for server_id in sorted(look):
            server = fleet.servers.get(server_id)
            if server is None or server.state is BUSY:
                continue
            if stopping:
                fleet.release(server, now, "the run is stopping")
            elif server.rented and server.claim is None:
                self._keep_or_release(server, now)
            elif server.rented and server.state is not BOOTING:
                self._wait_for_claimant(server, now)

    def _wait_for_claimant(self, server: Server, now: float) -> None:
        """A server up before the job it is meant for waits a boot's time for it; after that
        the job is not coming soon (its needs are late, or it can never run)."""
        start = server.idle_since
        claim = server.claim or ""
        if claim not in self._jobs.waiting:
            start = max(start, self._ends.eta.get(claim, start))
            start = max(start, self._jobs.retry_at.get(claim, start))
        until = start + self._fleet.boot.expected_s
        if now + EPS_S < until:
            self._look_at(server, until)
        else:
            self._fleet.release(server, now, f"{server.claim} did not come within a boot")

    def _keep_or_release(self, server: Server, now: float) -> None:
        up = server.state is not BOOTING
        start = server.idle_since if up else now
        until = start + self._fleet.boot.expected_s
        soon = None
        if outlives(server, until):
            self._fleet.release(server, now, "its maximum rental length ends within a boot")
            return
        if until > now + EPS_S:
            fits = self._jobs.fits
            waiting = (j for j in self._jobs.waiting if fits(server.quote, j))
            soon = next(waiting, None) or self._wanted_soon(server, until)
        if soon is None and (kept := self._warmth.keep_until(server, now)) is not None:
            self._look_at(server, kept)  # kept warm for the next job that fits it
        elif soon is None:
            self._fleet.release(server, now, "no job waiting can use it within a boot")
        elif up and not self._budget.extend(server.id, until, now):
            self._fleet.release(server, now, "keeping it for the next job would pass the budget")
        else:
            self._look_at(server, until)

    def _look_at(self, server: Server, until: float) -> None:
        # Just after `until`: a job ending at that very moment is told first, and takes it.
        self._out.append(SetTimer(until + _AFTER_TIE_S, BookTimer(BookWake.LOOK, server.id)))

    def _wanted_soon(self, server: Server, until: float) -> str | None:
        """A job about to be retried that fits, or one not ready yet that fits, should be
        ready by `until`, and has no other server to go to then."""
        fits = self._jobs.fits
        for job_id in self._jobs.retrying:
            if fits(server.quote, job_id):
                return job_id
        claims = self._fleet.claims
        for job_id, eta in self._ends.eta.items():
            if eta > until or job_id in claims or not fits(server.quote, job_id):
                continue
            if not self._covered(job_id, eta, server):
                return job_id
        return None

    def _covered(self, job_id: str, eta: float, besides: Server) -> bool:
        """Will a server other than `besides` be free for the job when it is ready? Usually
        the one its last need runs on."""
        end_of = self._ends.end_of
        for other in self._fleet.servers.values():
            if other is besides or other.claim not in (None, job_id):
                continue
            free_by = end_of(other.job) if other.job is not None else 0.0
            if free_by <= eta + EPS_S and self._jobs.fits(other.quote, job_id):
                return True
        return False
