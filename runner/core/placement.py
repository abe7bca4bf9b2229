"""Placement, pure: which waiting job each ready server runs.

A ready server runs the best waiting job it fits, in the order of the queue (priority, then
the longest remaining path), a job needing the one that just ran there (its files are warm)
winning a tie of user priority. The job a server was rented for has no say over a better
job, with one exception: a job takes a server rented for another only when the other loses
nothing by it (the server booting for the taker fits it instead, and the two swap); else the
other would rent again, paying a second boot and a second order. A server won back for one
job's retry runs that job only. A job whose time there the budget cannot hold is passed over,
and so is one that would outlive the server's maximum rental length (it rents elsewhere).
At most `cap` jobs run at once.
"""

from __future__ import annotations

from dataclasses import replace

from runner.core.book_part import BookPart, BookState
from runner.core.ends import Ends
from runner.core.fleet import AFTER_SCRIPT_S, BOOTING, Server, by_id, label
from runner.core.hedging import Hedger
from runner.core.known_jobs import Entry, WaitReason
from runner.core.ranks import Key
from runner.core.rental_length import outlives
from runner.core.rentals import JobNote, StartOn


class Placement(BookPart):
    """Starts waiting jobs on the idle servers of a fleet."""

    def __init__(
        self,
        state: BookState,
        ends: Ends,
        hedger: Hedger,
    ) -> None:
        super().__init__(state)
        self._ends = ends
        self._hedger = hedger

    def place(self, now: float) -> None:
        """Servers a waiting job needs the last job of go first (its files are warm there):
        with every server free, another would take that job by going first."""
        fleet, waiting = self._fleet, self._jobs.waiting
        if not fleet.idle or not waiting:
            return
        idle = list(fleet.idle.values())
        if len(idle) > 1:
            idle.sort(key=by_id)
            idle.sort(key=self._no_warm_job)  # stable: by id within each
        on, cap = fleet.on, self._cap
        for server in idle:
            if not waiting or len(on) >= cap:
                return
            self.place_on(server, now)

    def _no_warm_job(self, server: Server) -> bool:
        return self._warm_waiting(server) is None

    def place_on(self, server: Server, now: float) -> bool:
        """Start the best waiting job the server fits (see the module's rules)."""
        jobs = self._jobs
        waiting = jobs.waiting
        if server.kept_for is not None:  # won back for one job's retry: that one only
            return server.kept_for in waiting and self._start(server.kept_for, server, now)
        warm = self._warm_waiting(server)
        seen: list[Entry] = []
        placed = False
        limit = 4 * self._cap + 16
        while not placed and len(seen) <= limit:
            entry = jobs.pop_waiting()
            if entry is None:
                break
            seen.append(entry)
            if warm is not None and self._warm_first(warm, entry[0]):
                placed = self._may_take(warm, server) and self._start(warm, server, now)
                warm = None
            job_id = entry[2]
            if not placed and job_id in waiting and jobs.fits(server.quote, job_id):
                placed = self._may_take(job_id, server) and self._start(job_id, server, now)
        if not placed and warm is not None:
            placed = self._may_take(warm, server) and self._start(warm, server, now)
        jobs.push_back(seen)  # a job placed here is not pushed back: its entry is stale
        return placed

    def _warm_first(self, warm: str, best: Key) -> bool:
        """A warm job goes before a better-ranked one of the same user priority unless that
        one's remaining path is longer by more than a tenth of a boot: the files it saves
        copying are worth seconds, a delay on the critical path is not."""
        priority, rank, _ = self._jobs.records[warm].key
        return priority <= best[0] and rank <= best[1] + 0.1 * self._fleet.boot.expected_s

    def _warm_waiting(self, server: Server) -> str | None:
        if server.last_job is None:
            return None
        jobs = self._jobs
        last = jobs.records.get(server.last_job)
        if last is None or not last.dependents:
            return None
        waiting, quote = jobs.waiting, server.quote
        warm = [d for d in last.dependents if d in waiting and jobs.fits(quote, d)]
        if len(warm) < 2:  # most often: no key to compare
            return warm[0] if warm else None
        return min(warm, key=jobs.key_of)

    def _may_take(self, job_id: str, server: Server) -> bool:
        """A job takes a server rented for another only when the other loses nothing by it:
        the other is not ready yet (rented ahead: it follows this job there; it may even need
        this job, which would otherwise wait for ever), or the two can swap."""
        claimant = server.claim
        if claimant is None or claimant == job_id or server.rented_for != claimant:
            return True  # otherwise anyone's by rank, as a list schedule
        if claimant not in self._jobs.waiting:
            return True
        own = self._fleet.claimed(job_id)
        return (
            own is not None
            and own.state is BOOTING
            and own.claim == job_id
            and self._jobs.fits(own.quote, claimant)
        )

    def _say_boot_not_waited_for(self, job_id: str, server: Server) -> None:
        """The job starts on `server`, free first, while a server rented for it still boots
        (and is no hedge of this one: a hedge's loser says so itself). Starting now, on a
        server already paid for, beats waiting out the boot; that boot goes to another job
        or back, within the creation fee's grace. Said, since its order may run no job."""
        own = self._fleet.claimed(job_id)
        if own is None or own is server or own.state is not BOOTING or not own.rented:
            return
        if self._fleet.pairs.get(own.id) == server.id:
            return
        said = (
            f"started on {label(server.quote)}, free before {label(own.quote)} booting for it "
            "was up: that boot goes to another job or back"
        )
        self._out.append(JobNote(job_id, said))

    def _start(self, job_id: str, server: Server, now: float) -> bool:
        jobs, fleet = self._jobs, self._fleet
        want = jobs.waiting[job_id]
        until = now + want.timeout_s + AFTER_SCRIPT_S
        if outlives(server, until):
            # The market would end the order under the job: it runs elsewhere, and the
            # server is no longer meant for it (it would otherwise wait for it for ever).
            if fleet.claims.get(job_id) == server.id:
                fleet.unclaim(job_id)
            return False
        if server.rented and not self._budget.extend(server.id, until, now):
            jobs.waits_for(job_id, WaitReason.BUDGET)
            return False
        jobs.placed(job_id)
        claimant = server.claim
        if claimant is not None and claimant != job_id and server.rented_for == claimant:
            if claimant in jobs.waiting:
                fleet.swap(job_id, claimant, server)
            elif job_id in fleet.claims:  # rented ahead: its job follows this one here
                fleet.unclaim(job_id)
        else:
            if job_id in fleet.claims:
                self._say_boot_not_waited_for(job_id, server)
                fleet.unclaim(job_id)
            if claimant is not None and claimant != job_id:
                fleet.unclaim(claimant)  # a better job took it: that one plans again
        fleet.start(job_id, server, now)
        if server.rented and server.quote.trust is None:  # the domain it is of from now on
            server.quote = replace(server.quote, trust=want.job.trust)
        if fleet.pairs:
            self._hedger.drop(job_id, server, now)
        if self._renting:  # only renting plans with expected ends
            expected = want.expected_s
            end = now + expected if expected is not None else None
            self._ends.set_end(job_id, end, until, now)
        # Up (rented) before the job asked for a server: the job waited for no boot.
        warm = server.rented and server.idle_since < want.wanted_at
        waited_s = now - want.wanted_at
        self._out.append(StartOn(job_id, want.attempt, server.id, want.timeout_s, warm, waited_s))
        return True
