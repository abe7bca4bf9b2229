"""Renting ahead of need, pure.

Once every need of a job has an expected end, the job is due a server one expected boot
before those ends (runner/core/ends.py). Then it is planned onto a server it fits that will be
free for it by then (next on that server, after the job running there or the jobs already
planned onto it), or, when none will be, a server is rented for it now: renting ahead is for a
job that would otherwise wait for a boot. At the cap the job waits for a slot to open. A rent
ahead is a convenience: it never takes money a ready job may need.
"""

from __future__ import annotations

import math

from runner.core.book_part import BookPart, BookState
from runner.core.ends import Ends
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S, BOOTING, EPS_S
from runner.core.rental_length import best_that_holds, boot_allowance_s, outlives
from runner.core.renting import Renter


class RentAhead(BookPart):
    """Plans the due jobs of a book onto servers, renting ahead where none will be free."""

    def __init__(
        self,
        state: BookState,
        ends: Ends,
        renter: Renter,
    ) -> None:
        super().__init__(state)
        self._ends = ends
        self._renter = renter

    def rent_ahead(self, now: float) -> None:
        """Plan each due job onto a server that will be free for it, or rent one now. At the
        cap, a job that would need a new server waits for a slot to open."""
        jobs, ends, fleet = self._jobs, self._ends, self._fleet
        if jobs.raises and ends.due:
            jobs.make_raises()
        for job_id in sorted(ends.due, key=jobs.key_of):
            ends.take_due(job_id)
            if job_id not in ends.eta or job_id in fleet.claims:
                continue
            eta = ends.refresh_eta(job_id, now)
            start_at = eta - fleet.boot.expected_s
            if start_at > now + EPS_S:  # its needs are later than first thought
                self._out.append(SetTimer(start_at, BookTimer(BookWake.AHEAD, job_id)))
            elif self._server_will_be_free(job_id, eta, now):
                continue
            elif len(fleet.servers) >= self._cap:
                ends.starve(job_id)
            else:
                self._rent_for(job_id, eta, now)

    def _server_will_be_free(self, job_id: str, eta: float, now: float) -> bool:
        """A server it fits will be there when its needs are done: expect that one (next on
        it, or after the job it is meant for), and plan the job's end on it."""
        fleet, ends, boot = self._fleet, self._ends, self._fleet.boot
        for server in fleet.servers.values():
            if not self._jobs.fits(server.quote, job_id):
                continue
            last = server.after[-1] if server.after else server.claim
            if last is None:
                ahead_of_it = server.job
            elif ends.end_of(last) < math.inf:
                ahead_of_it = last
            else:
                continue
            if ahead_of_it is not None:
                free_by, worst_free = ends.end_of(ahead_of_it), ends.worst_of(ahead_of_it)
            elif server.state is BOOTING:
                free_by = server.since + boot.expected_s
                worst_free = server.since + boot.allowance_for(server.quote.image)
            else:
                free_by = worst_free = now
            job_s = self._jobs.records[job_id].job.timeout_s + AFTER_SCRIPT_S
            if outlives(server, worst_free + job_s):
                continue  # its maximum rental length ends before the job could
            # Waiting for a held server is right unless a server rented now would be up
            # sooner: renting ahead is for a job that would otherwise wait for a boot.
            if free_by > max(eta, now + boot.expected_s) + EPS_S:
                continue
            if server.claim is None:
                fleet.claim(job_id, server)
            else:
                fleet.plan_after(job_id, server)
            ends.plan_end(job_id, max(eta, free_by), worst_free, now)
            return True
        return False

    def _rent_for(self, job_id: str, eta: float, now: float) -> None:
        record = self._jobs.records[job_id]
        job, fleet, ends = record.job, self._fleet, self._ends
        worst_ready = max((ends.worst_of(n) for n in record.needs), default=now)
        wait_s = max(boot_allowance_s(fleet.boot, job), worst_ready - now)
        hold_s = wait_s + job.timeout_s + AFTER_SCRIPT_S
        quote, _ = best_that_holds(self._jobs.market, job.gpu, fleet.not_to_rent(), hold_s)
        if quote is None:
            return  # it rents (or fails, saying why) when it is ready
        cost = quote.cost_usd(hold_s)
        if self._budget.over(cost, now) > 0:
            return  # ahead is a convenience: it never takes money a ready job may need
        self._renter.rent(job_id, quote, now + hold_s, cost, now, ahead=True)
        boot = fleet.boot
        worst = now + boot.allowance_for(job.image)
        ends.plan_end(job_id, max(eta, now + boot.expected_s), worst, now)
