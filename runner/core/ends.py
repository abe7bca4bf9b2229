"""When each job should end, and when each job's needs should be done, pure.

A renting book plans with expected ends: a job's end is known once it starts (its expected
duration, or none), once it is planned onto a server (a rent, a server it will follow a job
on) and once it settles (now). The first known end of each need counts towards its
dependents: when every need of a job has one, the job's `eta` (its needs' latest end) is known,
and one expected boot before it the job is due a server ahead (`due`; at the cap, `starved`
until a slot opens). Worst ends (the timeout of each link, and the longest boot) bound what a
rent ahead reserves. A book of fixed hosts keeps none of this.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from runner.core.book_part import BookPart, BookState
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import AFTER_SCRIPT_S, EPS_S
from runner.core.rentals import Provisioning


class Ends(BookPart):
    """Expected ends of the jobs a renting book holds, and the jobs due a server ahead."""

    def __init__(self, state: BookState, provisioning: Provisioning) -> None:
        super().__init__(state)
        self._ahead = provisioning is Provisioning.AHEAD and state.renting
        self._eta: dict[str, float] = {}  # unready jobs: when all their needs should be done
        self._due: dict[str, None] = {}  # jobs whose server should be rented ahead now
        self._starved: dict[str, None] = {}  # due, but at the cap: due again when a slot opens

    # -- what the other parts read and do ----------------------------------------------------

    @property
    def eta(self) -> Mapping[str, float]:
        """Unready jobs: when all their needs should be done."""
        return self._eta

    @property
    def due(self) -> Mapping[str, None]:
        """Jobs whose server should be rented ahead now."""
        return self._due

    @property
    def starved(self) -> Mapping[str, None]:
        """Due, but at the cap: due again when a slot opens."""
        return self._starved

    def timer_due(self, job_id: str) -> None:
        """The timer set for the job's rent ahead came due: it is due, if still planned."""
        if job_id in self._eta:
            self._due[job_id] = None

    def take_due(self, job_id: str) -> None:
        """The job's rent ahead is being decided: it is no longer due."""
        del self._due[job_id]

    def starve(self, job_id: str) -> None:
        """Due at the cap: due again when a slot opens."""
        self._starved[job_id] = None

    def refresh_eta(self, job_id: str, now: float) -> float:
        """When the job's needs should all be done, as known now: its eta from now on."""
        eta = self._eta[job_id] = self.needs_end(job_id, now)
        return eta

    def wake_starved(self) -> None:
        """A slot under the cap opened: the jobs that waited for one are due again."""
        if self._starved:
            self._due.update(self._starved)
            self._starved.clear()

    def ready(self, job_id: str) -> None:
        """The job waits for a server now: it is no longer planned ahead."""
        if job_id in self._eta:
            del self._eta[job_id]
        if job_id in self._due:
            del self._due[job_id]

    def drop(self, job_id: str) -> None:
        """The job is ready (or final): nothing is rented ahead for it any more."""
        if job_id in self._eta:
            del self._eta[job_id]
        if job_id in self._due:
            del self._due[job_id]
        if job_id in self._starved:
            del self._starved[job_id]

    def set_end(self, job_id: str, end: float | None, worst: float, now: float) -> None:
        """Record when a job is expected to end (None: unknown) and its worst case; the first
        known end of each need counts towards its dependents' rent-ahead. Only renting
        plans with them: a book of fixed hosts keeps none."""
        if not self._renting:
            return
        known = self._jobs.records
        record = known[job_id]
        if record.worst_end is None or worst > record.worst_end:
            record.worst_end = worst
        if end is None:
            return
        first = record.end is None
        record.end = end
        if not first:
            return
        for child in record.dependents or ():
            held = known[child]
            held.ends_known += 1
            if held.ends_known == len(held.needs):
                self.needs_known(child, now)

    def plan_end(self, job_id: str, start: float, worst_start: float, now: float) -> None:
        """The job should start at `start` (at worst `worst_start`): record its end."""
        record = self._jobs.records[job_id]
        worst_ready = max((self.worst_of(n) for n in record.needs), default=now)
        worst = max(worst_ready, worst_start) + record.job.timeout_s + AFTER_SCRIPT_S
        expected = record.expected_s
        self.set_end(job_id, start + expected if expected is not None else None, worst, now)

    def end_of(self, job_id: str) -> float:
        """When the job should end (infinity: not known)."""
        record = self._jobs.records.get(job_id)
        end = record.end if record is not None else None
        return end if end is not None else math.inf

    def worst_of(self, job_id: str) -> float:
        worst = self._jobs.records[job_id].worst_end
        if worst is None:  # every job planned with has one: its start recorded it
            raise KeyError(job_id)
        return worst

    def needs_end(self, job_id: str, now: float) -> float:
        """When the job's needs should all be done (now, when it has none)."""
        known = self._jobs.records
        latest: float | None = None
        for need in known[job_id].needs:
            end = known[need].end
            if end is None:  # every need has an end once this is asked: its start set it
                raise KeyError(need)
            if latest is None or end > latest:
                latest = end
        return now if latest is None else latest

    def needs_known(self, job_id: str, now: float) -> None:
        """Every need has an expected end: the job can be planned for."""
        record = self._jobs.records[job_id]
        if record.settled or job_id in self._jobs.waiting or job_id in self._fleet.on:
            return
        eta = self.needs_end(job_id, now)
        self._eta[job_id] = eta
        if not self._ahead or not record.needs:
            return
        start_at = eta - self._fleet.boot.expected_s
        if start_at <= now + EPS_S:
            self._due[job_id] = None
        else:
            self._out.append(SetTimer(start_at, BookTimer(BookWake.AHEAD, job_id)))
