"""Hedged boots, the book's side, pure: when a boot runs late, a second host beside it.

The policy (how late is late, whether the cap allows one) is runner/core/hedge.py. Here: a
timer per boot for when it would be late; at that time a boot still booting for a waiting job
gets a second fitting host, if the cap and the budget allow (its worst case reserved like any
rent), or a note that says why not; the first of the pair to answer SSH wins and the other goes
back at once; a job that starts elsewhere sends back every boot still meant for it. The pairs
themselves live in the fleet (`Fleet.pairs`, `Fleet.unpair`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from runner.core.book_part import BookPart, BookState
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import BOOTING, EPS_S, Server, label
from runner.core.hedge import HedgePolicy
from runner.core.known_jobs import Known
from runner.core.money import usd_text
from runner.core.pulls import Pulls
from runner.core.rental_length import best_that_holds, worst_hold_s
from runner.core.rentals import JobNote

# A late boot that cannot be hedged yet (its job not ready, or its hedge still booting) is
# looked at again this often: a hedge that fails leaves a boot to hedge again at once.
HEDGE_AGAIN_S = 10.0


class Hedger(BookPart):
    """Hedges the slow boots of a fleet."""

    def __init__(self, state: BookState, policy: HedgePolicy) -> None:
        super().__init__(state)
        self.policy = policy
        self.pulls = Pulls()  # each image's pulls, from the host history

    def arm(self, server: Server) -> None:
        """Look at this boot again when it has run long enough to be hedged."""
        if self.policy.enabled:
            after_s = self._after_s(server)
            if after_s < math.inf:
                self._out.append(
                    SetTimer(server.since + after_s, BookTimer(BookWake.HEDGE, server.id))
                )

    def deploying(self, server: Server, now: float) -> None:
        """The boot is online, its container deploying: alive. From now on it is hedged
        only if its pull runs late by what this image took elsewhere."""
        if server.online_at is None:
            server.online_at = now
            self.arm(server)

    def _after_s(self, server: Server) -> float:
        """How long after its create the boot is hedged (inf: never)."""
        if server.online_at is not None:
            record = self._jobs.records.get(server.claim or "")
            image = record.job.image if record is not None else None
            expected = self.pulls.expected_s(image or "", server.quote.host)
            after = self.policy.deploy_after_s(expected)
            return math.inf if after is None else server.online_at - server.since + after
        q = server.quote
        boot = self._fleet.boot
        expected = q.boot_s if q.boot_s is not None else boot.expected_s
        record = self._jobs.records.get(server.claim or "")
        own = record.job.boot_timeout_s if record is not None else None  # the job's own bound
        bound_s = own if own is not None else boot.allowance_s
        return self.policy.after_s(expected, q.fail_chance or 0.0, bound_s)

    def hedge_due(self, now: float) -> None:
        """Each boot due and still booting for a waiting job gets a second fitting host, if
        the policy, the cap and the budget allow; a slow boot that gets none says why."""
        fleet = self._fleet
        due, fleet.to_hedge = fleet.to_hedge, []
        for server_id in due:
            server = fleet.servers.get(server_id)
            if server is None or server.state is not BOOTING or server.claim is None:
                continue  # up, given back, or meant for no job now
            if now + EPS_S < server.since + self._after_s(server):
                continue  # not late (a timer of an earlier plan): its own timer comes
            want = self._jobs.waiting.get(server.claim)
            if want is None or server_id in fleet.pairs:
                # Rented ahead, its job not ready yet; or hedged already, and the hedge may
                # fail first: look again in a while.
                self._out.append(
                    SetTimer(now + HEDGE_AGAIN_S, BookTimer(BookWake.HEDGE, server_id))
                )
                continue
            self._hedge(server, server.claim, want, now)

    def _hedge(self, server: Server, job_id: str, want: Known, now: float) -> None:
        fleet = self._fleet
        why = self.policy.may_hedge(len(fleet.servers), self._cap)
        quote = None
        hold_s = worst_hold_s(fleet.boot.allowance_s, want.job, want.timeout_s)
        if why is None:
            market = self._jobs.market
            quote, _ = best_that_holds(market, want.job.gpu, fleet.not_to_rent(), hold_s)
            why = "no other host fits" if quote is None else None
        cost = quote.cost_usd(hold_s) if quote else 0
        if quote is not None and self._budget.over(cost, now) > 0:
            why = f"the budget cannot hold a second boot's worst case ({usd_text(cost)})"
        if why is not None or quote is None:
            late = now - server.since
            said = f"no hedge for the boot of {label(server.quote)} ({late:.0f} s so far): {why}"
            self._out.append(JobNote(job_id, said))
            return
        hedge = fleet.rent_hedge(server, job_id, quote, now + hold_s, cost, now)
        hedge.quote = replace(quote, image=server.quote.image)  # the same job's image
        slow = f"the boot of {label(server.quote)} runs late ({now - server.since:.0f} s)"
        said = f"{slow}: renting {label(quote)} beside it; the first to answer SSH runs it"
        self._out.append(JobNote(job_id, said))
        self.arm(hedge)

    def won(self, server: Server, now: float) -> None:
        """One of a hedged pair answers SSH: the other, still booting, goes back at once."""
        fleet = self._fleet
        other = fleet.servers.get(fleet.pairs.get(server.id, -1))
        if other is not None and other.state is BOOTING and other.job is None:
            fleet.release(other, now, f"hedge: {label(server.quote)} answered SSH first")
        else:
            fleet.unpair(server)

    def drop(self, job_id: str, started_on: Server, now: float) -> None:
        """The job started: a boot still meant for it (its hedge, or a boot the job did not
        wait for) goes back at once."""
        fleet = self._fleet
        for server_id in list(fleet.pairs):
            server = fleet.servers.get(server_id)
            if server is not None and server.claim == job_id and server.state is BOOTING:
                fleet.release(server, now, f"hedge: {job_id} started on {label(started_on.quote)}")
