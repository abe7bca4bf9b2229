"""Renting for jobs that are ready, pure.

A waiting job with no server coming rents the best offer, when a slot under the cap and the
budget allow. It rents nothing when a server is booting for it, when a booting server nobody is
meant for fits it (one rented ahead for a job that went elsewhere), or when a busy server it
fits is expected free within a boot (as quick as a new rental, and cheaper). The reservation is
the rental's worst case: the longest boot, the job's timeout and the time to fetch its
artifacts, at the price with the renter's fee, plus the creation fee whenever the order could
live long enough to be charged it. Short of money, servers rented ahead for jobs not ready yet
go back first; then the job waits (a daily budget: for the next day) or, with nothing held that
could free money, fails. A job whose only offer is a host being released waits for that
release; a job no offer fits fails with why, and with the hosts that failed it.
"""

from __future__ import annotations

from dataclasses import replace

from runner.core.book_part import BookPart, BookState
from runner.core.budget import DAY_S
from runner.core.ends import Ends
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S, BOOTING, BUSY, Server, by_id, label
from runner.core.hedging import Hedger
from runner.core.known_jobs import Entry, Known, WaitReason
from runner.core.model import FailureKind, Job
from runner.core.rental_length import (
    best_that_holds,
    boot_allowance_s,
    job_hold_s,
    outlives,
    passed_over_text,
)
from runner.core.rentals import Quote, RentFailed

MAX_OFFERS_PER_ATTEMPT = 5  # hosts tried for one attempt before it fails as provisioning


def started_with(quote: Quote, job: Job) -> Quote:
    """A server rented for `job` runs its image (\"\": the default): no other image's job fits."""
    return replace(quote, image=job.image or "")


class Renter(BookPart):
    """Rents servers for the waiting jobs of a book."""

    def __init__(
        self,
        state: BookState,
        ends: Ends,
        hedger: Hedger,
    ) -> None:
        super().__init__(state)
        self._ends = ends
        self._hedger = hedger
        self._day_timer: int | None = None  # the day the book last asked to be woken on

    def rent_for_waiting(self, now: float) -> None:
        """A server for each waiting job that has none coming, best first."""
        jobs = self._jobs
        seen: list[Entry] = []
        soon_free = self._soon_free(now)  # promised to the first waiting jobs they fit
        while len(seen) <= 4 * self._cap + 16:
            entry = jobs.pop_waiting()
            if entry is None:
                break
            seen.append(entry)
            job_id = entry[2]
            if job_id in self._fleet.claims or self._claim_booting(job_id, now):
                jobs.waits_for(job_id, WaitReason.BOOT, first=True)  # its server is coming
                continue
            want = jobs.waiting[job_id]
            promised = next((s for s in soon_free if self._holds_after(s, want)), None)
            if promised is not None:
                jobs.waits_for(job_id, WaitReason.REUSE, first=True)
                soon_free.remove(promised)
                continue
            if not self._room(now):
                jobs.waits_for(job_id, WaitReason.CAP, first=True)
                if not soon_free:
                    break  # at the cap, nothing frees within a boot: no one else can go
                continue
            self._rent_now(job_id, jobs.waiting[job_id], now)
        jobs.push_back(seen)  # one that failed to rent is no longer waiting

    def rent(
        self, job_id: str, quote: Quote, until: float, cost_usd: float, now: float, ahead: bool
    ) -> None:
        server = self._fleet.rent(job_id, quote, until, cost_usd, now, ahead)
        server.quote = started_with(quote, self._jobs.records[job_id].job)
        self._hedger.arm(server)

    def _soon_free(self, now: float) -> list[Server]:
        """Busy servers expected to be free within a boot, nobody's yet: waiting for one is
        as quick as renting, and cheaper."""
        horizon = now + self._fleet.boot.expected_s
        end_of = self._ends.end_of
        return [
            s
            for s in self._fleet.servers.values()
            if s.state is BUSY and s.claim is None and end_of(s.job or "") <= horizon
        ]

    def _holds_after(self, server: Server, want: Known) -> bool:
        """Does busy `server` fit the job and hold its worst case after the job on it ends?"""
        if not self._jobs.fits(server.quote, want.job.id):
            return False
        free_at = self._ends.end_of(server.job or "")
        return not outlives(server, free_at + want.timeout_s + AFTER_SCRIPT_S)

    def _claim_booting(self, job_id: str, now: float) -> bool:
        """Claim a booting server nobody is meant for (one rented ahead for a job that then
        went elsewhere)."""
        fleet = self._fleet
        for server in fleet.servers.values():
            free = server.state is BOOTING and server.claim is None
            if free and self._holds_job(server, job_id, self._jobs.waiting[job_id], now):
                fleet.claim(job_id, server)
                return True
        return False

    def _room(self, now: float) -> bool:
        """Is there a slot under the cap? Makes one by giving back an idle server no waiting
        job is meant for, when that is what stands in the way."""
        fleet = self._fleet
        if len(fleet.servers) < self._cap:
            return True
        spare = [s for s in sorted(fleet.idle.values(), key=by_id) if s.rented and s.claim is None]
        if spare:
            fleet.release(spare[0], now, "making room for a job that fits no server held")
            return True
        # A rent ahead is a convenience: it never holds the slot a ready job needs. At a cap
        # of one, a job's rent refused and retried while its dependent's server was rented
        # ahead would wait for ever beside it (the fault suite's F12).
        waiting = self._jobs.waiting
        for server in sorted(fleet.servers.values(), key=by_id):
            ahead = server.claim is not None and server.claim not in waiting
            if server.rented and server.job is None and ahead and server.kept_for is None:
                fleet.release(server, now, "its slot is needed by a job that is ready")
                return True
        return False

    def _rent_now(self, job_id: str, want: Known, now: float) -> None:
        fleet, budget = self._fleet, self._budget
        hold_s = job_hold_s(fleet.boot, want.job, want.timeout_s)
        market = self._jobs.market
        quote, passed = best_that_holds(market, want.job.gpu, fleet.not_to_rent(), hold_s)
        if quote is None:
            if self._freed_soon(job_id):
                # Short of money first, if it is.
                self._jobs.waits_for(job_id, WaitReason.RELEASE, first=True)
            elif not any(self._holds_job(s, job_id, want, now) for s in fleet.servers.values()):
                self._none_left(job_id, want, passed_over_text(passed, hold_s))
            return
        cost = quote.cost_usd(hold_s)
        over = budget.over(cost, now)
        if over > 0:
            self._drop_ahead_rentals(now)
            over = budget.over(cost, now)
        if over > 0:
            self._jobs.waits_for(job_id, WaitReason.BUDGET)
            if budget.day is not None:
                self._wait_for_next_day(job_id, want, quote, hold_s, cost, now)
            elif not any(s.rented for s in fleet.servers.values()):
                text = budget.refusal(quote, hold_s, cost, over, now)
                self.fail(job_id, want, FailureKind.UNAVAILABLE, text)
            return
        self.rent(job_id, quote, now + hold_s, cost, now, ahead=False)
        boot = fleet.boot
        worst_ready = now + boot.allowance_for(want.job.image)
        self._ends.plan_end(job_id, now + boot.expected_s, worst_ready, now)

    def _wait_for_next_day(
        self, job_id: str, want: Known, quote: Quote, hold_s: float, cost: float, now: float
    ) -> None:
        """A daily budget: the job waits for the next day's, unless a whole day's is short."""
        budget = self._budget
        assert budget.day is not None
        over = budget.over_a_day(cost)
        if over > 0:
            text = budget.refusal(quote, hold_s, cost, over + 1e-9, now)
            self.fail(job_id, want, FailureKind.UNAVAILABLE, f"a day's {text}")
            return
        if self._day_timer != budget.day + 1:  # once a day, for every job waiting so
            self._day_timer = budget.day + 1
            self._out.append(
                SetTimer(self._day_timer * DAY_S, BookTimer(BookWake.DAY, self._day_timer))
            )

    def _holds_job(self, server: Server, job_id: str, want: Known, now: float) -> bool:
        """Could the job still run on `server`: it fits, and its worst case there (a boot
        first, if it is booting) ends before the server's maximum rental length does."""
        if not self._jobs.fits(server.quote, job_id):
            return False
        booting = server.state is BOOTING
        start = server.since + boot_allowance_s(self._fleet.boot, want.job) if booting else now
        return not outlives(server, max(start, now) + want.timeout_s + AFTER_SCRIPT_S)

    def _none_left(self, job_id: str, want: Known, passed_over: str = "") -> None:
        """No offer fits the job (any more): say why, which offers were passed over for their
        maximum rental length, and which hosts failed it before."""
        # Offers passed over for their length did fit otherwise: that is the whole reason.
        why = passed_over or self._jobs.market.why_none(want.job.gpu, self._fleet.excluded.hosts)
        tried = want.rent_failures
        if not tried:
            self.fail(job_id, want, FailureKind.UNAVAILABLE, why)
            return
        message = f"{len(tried)} offers failed to start: " + "; ".join(tried[-3:]) + f" ({why})"
        self.fail(job_id, want, FailureKind.PROVISIONING_FAILED, message)

    def _drop_ahead_rentals(self, now: float) -> None:
        """Servers rented ahead for jobs not ready yet give their money to a job that is."""
        waiting = self._jobs.waiting
        for server in list(self._fleet.servers.values()):
            ahead = server.claim is not None and server.claim not in waiting
            if server.rented and server.job is None and ahead and server.kept_for is None:
                self._fleet.release(server, now, "its money is needed by a job that is ready")

    def _freed_soon(self, job_id: str) -> bool:
        """Is the offer the job would rent on a host whose release is being confirmed? Then
        it waits for that instead of failing for want of an offer."""
        fleet = self._fleet
        if not fleet.releasing:
            return False
        held = {s.quote.host for s in fleet.servers.values()}
        gpu = self._jobs.records[job_id].job.gpu
        quote = self._jobs.market.best(gpu, fleet.excluded.hosts | held)
        return quote is not None and quote.host in {s.quote.host for s in fleet.releasing.values()}

    def fail(self, job_id: str, want: Known, kind: FailureKind, message: str) -> None:
        """The waiting attempt gets no server: it ends with `kind` (the book's `unplaceable`)."""
        self._jobs.fail(job_id, want, kind, message)
        self._fleet.unclaim(job_id)

    def rent_failed(self, server: Server, event: RentFailed) -> None:
        """The rent of `server` failed (not fatally; the fleet has forgotten it): the job it
        was for rents again, or fails when no host can run it or too many failed it."""
        job_id = server.claim
        want = self._jobs.waiting.get(job_id) if job_id is not None else None
        if job_id is None or want is None:
            return  # rented ahead: the job rents again once it is ready
        if event.job_cannot_run:
            self.fail(job_id, want, FailureKind.UNAVAILABLE, event.reason)
            return
        want.rent_failures = tried = (*want.rent_failures, event.reason)
        if len(tried) >= MAX_OFFERS_PER_ATTEMPT:
            message = f"{MAX_OFFERS_PER_ATTEMPT} offers failed to start; last: {event.reason}"
            self.fail(job_id, want, FailureKind.PROVISIONING_FAILED, message)

    def server_wait(self, job_id: str) -> str | None:
        """What a waiting job's server is doing, for a person (None: the job is not waiting)."""
        if job_id not in self._jobs.waiting:
            return None
        server = self._fleet.claimed(job_id)
        if server is not None and server.state is BOOTING:
            return f"renting a server for it ({label(server.quote)}), booting"
        why = self._jobs.why.get(job_id)
        if why is WaitReason.CAP:
            return f"waiting for a server: {len(self._fleet.servers)} of {self._cap} held (the cap)"
        if why is WaitReason.BUDGET:
            daily = " today" if self._budget.day is not None else ""
            return f"waiting for a server: the budget{daily} cannot hold its worst case yet"
        if why is WaitReason.RELEASE:
            return "waiting for a server being given back to be released"
        if why is WaitReason.REUSE or server is not None:
            return "waiting for a server to come free"
        if not self._renting:  # hosts that already exist: one must come free
            return "a free slot"
        return "waiting for a server"
