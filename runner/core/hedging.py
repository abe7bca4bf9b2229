"""Hedged boots, the book's side, pure: when a boot runs late, a second host beside it.

The policy (how late is late, whether the cap allows one) is runner/core/hedge.py. Here: a
timer per boot for when it would be late; at that time a boot still booting for a waiting job
gets a second fitting host, if the cap and the budget allow (its worst case reserved like any
rent), or a note that says why not; the first of the pair to answer SSH wins and the other goes
back at once; a job that starts elsewhere sends back every boot still meant for it. Who races
whom is runner/core/races.py, held by the fleet, whose servers leave a race (`Fleet.unpair`).
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
from runner.core.rental_length import best_that_holds, job_hold_s
from runner.core.rentals import JobNote, Quote

# A late boot that cannot be hedged yet (its job not ready, or its hedge still booting) is
# looked at again this often: a hedge that fails leaves a boot to hedge again at once.
HEDGE_AGAIN_S = 10.0


def _since(server: Server) -> float:
    return server.since


class Hedger(BookPart):
    """Hedges the slow boots of a fleet."""

    def __init__(self, state: BookState, policy: HedgePolicy) -> None:
        super().__init__(state)
        self._policy = policy
        self._pulls = Pulls()  # each image's pulls, from the host history
        # The boots racing for each job: the fleet's (its servers leave them), hedged here.
        self._races = state.fleet.races

    @property
    def policy(self) -> HedgePolicy:
        """When and how a late boot is hedged (the book's setting)."""
        return self._policy

    @policy.setter
    def policy(self, policy: HedgePolicy) -> None:
        self._policy = policy

    @property
    def pulls(self) -> Pulls:
        """Each image's pulls, as the host history saw them (the book's setting)."""
        return self._pulls

    @pulls.setter
    def pulls(self, pulls: Pulls) -> None:
        self._pulls = pulls

    def arm(self, server: Server) -> None:
        """Look at this boot again when it has run long enough to be hedged."""
        if self._policy.enabled:
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
        if server.online_at is None and server.hedge_of is not None:
            return min(self._boot_after_s(server), self._policy.racing_after_s)
        if server.online_at is not None:
            record = self._jobs.records.get(server.claim or "")
            image = record.job.image if record is not None else None
            expected = self._pulls.expected_s(image or "", server.quote.host)
            after = self._policy.deploy_after_s(expected)
            return math.inf if after is None else server.online_at - server.since + after
        return self._boot_after_s(server)

    def _boot_after_s(self, server: Server) -> float:
        """A boot not online: late after the policy's time for its host."""
        q = server.quote
        boot = self._fleet.boot
        expected = q.boot_s if q.boot_s is not None else boot.expected_s
        record = self._jobs.records.get(server.claim or "")
        own = record.job.boot_timeout_s if record is not None else None  # the job's own bound
        bound_s = own if own is not None else boot.allowance_for(q.image)
        return self._policy.after_s(expected, q.fail_chance or 0.0, bound_s)

    def look_soon(self, server_id: int) -> None:
        """The boot's hedge timer came due: look at it in the next decision."""
        self._races.hedge_soon((server_id,))

    def hedge_due(self, now: float) -> None:
        """Each boot due and still booting for a waiting job gets a second fitting host, if
        the policy, the cap and the budget allow; a slow boot that gets none says why."""
        fleet = self._fleet
        due = self._races.take_to_hedge()
        for server_id in due:
            server = fleet.servers.get(server_id)
            if server is None or server.state is not BOOTING or server.claim is None:
                continue  # up, given back, or meant for no job now
            if now + EPS_S < server.since + self._after_s(server):
                continue  # not late (a timer of an earlier plan): its own timer comes
            want = self._jobs.waiting.get(server.claim)
            racing = self._races.racing
            if want is not None and not self._policy.hedges_now(len(racing(server_id))):
                self._make_room(server, want, now)  # the oldest racer not online gives way
            if want is None or not self._policy.hedges_now(len(racing(server_id))):
                # Rented ahead, its job not ready yet; or as many boots racing for its job
                # as the policy allows, and one may fail first: look again in a while.
                self._out.append(
                    SetTimer(now + HEDGE_AGAIN_S, BookTimer(BookWake.HEDGE, server_id))
                )
                continue
            self._hedge(server, server.claim, want, now)

    def _make_room(self, server: Server, want: Known, now: float) -> None:
        """As many boots racing for the job as the policy allows, `server` late among them:
        the oldest other racer still not online `racing_after_s` past its own lateness goes
        back (it is all but dead; its bound would give it up soon), for a fresh host. Its
        host is not rented again in this run, as one whose boot failed: given back before
        its bound it would fail no rent, and a ring among a few dead cheap hosts would re-rent
        them in turn for ever, each given way to before the bound could end the run. Nor
        does a racer go back before it has run `min_after_s` (no boot is up sooner): a racer
        rented this instant would make room for the next at the same instant."""
        fleet, extra_s = self._fleet, self._policy.racing_after_s
        first_s = self._policy.min_after_s
        late = [
            other
            for other_id in self._races.racing(server.id)[1:]
            if (other := fleet.servers.get(other_id)) is not None
            and other.state is BOOTING
            and other.online_at is None
            and now + EPS_S >= other.since + max(self._after_s(other) + extra_s, first_s)
        ]
        if late and self._fresh(want) is not None:  # none: the racers may still come up
            oldest = min(late, key=_since)
            why = f"hedge: not online after {now - oldest.since:.0f} s; a fresh host in its place"
            fleet.excluded.exclude(oldest.quote.host, now)
            fleet.release(oldest, now, why)

    def _hedge(self, server: Server, job_id: str, want: Known, now: float) -> None:
        """Rent as many hedges as the policy gives the late boot, each while the cap, the
        market and the budget allow (the first refusal is said, and ends it)."""
        racing = len(self._races.racing(server.id))
        fan = server.online_at is None and self._after_s(server) > 0
        for n in range(self._policy.hedges_now(racing, fan)):
            if not self._hedge_one(server, job_id, want, now, say_no=n == 0):
                return

    def _hedge_one(
        self, server: Server, job_id: str, want: Known, now: float, say_no: bool = True
    ) -> bool:
        fleet = self._fleet
        why = self._policy.may_hedge(len(fleet.servers), self._cap)
        quote = None
        hold_s = job_hold_s(fleet.boot, want.job, want.timeout_s)
        if why is None:
            quote = self._fresh(want)
            why = "no other host fits" if quote is None else None
        cost = quote.cost_usd(hold_s) if quote else 0
        if quote is not None and self._budget.over(cost, now) > 0:
            why = f"the budget cannot hold a second boot's worst case ({usd_text(cost)})"
        if why is not None or quote is None:
            late = now - server.since
            said = f"no hedge for the boot of {label(server.quote)} ({late:.0f} s so far): {why}"
            if say_no:  # (a second hedge refused beside a first is no news)
                self._out.append(JobNote(job_id, said))
            return False
        hedge = fleet.rent_hedge(server, job_id, quote, now + hold_s, cost, now)
        hedge.quote = replace(quote, image=server.quote.image)  # the same job's image
        slow = f"the boot of {label(server.quote)} runs late ({now - server.since:.0f} s)"
        said = f"{slow}: renting {label(quote)} beside it; the first to answer SSH runs it"
        self._out.append(JobNote(job_id, said))
        self.arm(hedge)
        return True

    def _fresh(self, want: Known) -> Quote | None:
        """The best host to race for the job beside those held (None: no other fits)."""
        fleet = self._fleet
        hold_s = job_hold_s(fleet.boot, want.job, want.timeout_s)
        quote, _ = best_that_holds(self._jobs.market, want.job.gpu, fleet.not_to_rent(), hold_s)
        return quote

    def won(self, server: Server, now: float) -> None:
        """One of the boots racing for a job answers SSH: the others still booting go back
        at once."""
        fleet = self._fleet
        for other_id in self._races.racing(server.id)[1:]:
            other = fleet.servers.get(other_id)
            if other is not None and other.state is BOOTING and other.job is None:
                fleet.release(other, now, f"hedge: {label(server.quote)} answered SSH first")
        fleet.unpair(server)  # any left are up already: each on its own from now

    def drop(self, job_id: str, started_on: Server, now: float) -> None:
        """The job started: a boot still meant for it (its hedge, or a boot the job did not
        wait for) goes back at once."""
        fleet = self._fleet
        for server_id in list(fleet.pairs):
            server = fleet.servers.get(server_id)
            if server is not None and server.claim == job_id and server.state is BOOTING:
                fleet.release(server, now, f"hedge: {job_id} started on {label(started_on.quote)}")
