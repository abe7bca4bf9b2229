"""A backend whose every attempt passes at once, running nothing, on a place of its own.

The tests' own backends start from it and change only what they are about: where a job
goes (`where`, `usd_per_hour`), how its attempt ends (`outcome`), or a method of their own.
Its servers are slots that exist from the start (`FixedServers`), as the local backend's are.
"""

from __future__ import annotations

import threading

from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.fixed import FixedServers
from runner.core.model import Job


class PassingBackend(FixedServers):
    name = "passing"
    where = "nowhere"
    usd_per_hour = 0.0
    outcome = RunOutcome(0, None)

    def capacity(self) -> int | None:
        return None

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        return Place(self.where, usd_per_hour=self.usd_per_hour)

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        return self.outcome

    def attempt_done(self, place: Place) -> None:
        return None

    def shutdown(self) -> None:
        return None
