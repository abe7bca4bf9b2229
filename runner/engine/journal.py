"""Where the driver reports what happened: the `Journal` protocol, and several as one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Protocol

from runner.backends.base import Place
from runner.core.model import Attempt, Job, JobResult


class Journal(Protocol):
    """Where the driver reports what happened, in the order it happened (loop thread only)."""

    def batch(self) -> AbstractContextManager[None]:
        """Around the reports of one event's commands: a store writes them in one transaction,
        before any attempt among them starts."""
        ...

    def attempt_started(self, job: Job, number: int, now: float) -> None: ...

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        """The attempt holds `place` (a server, its facts and price): its script starts now."""
        ...

    def attempt_ended(self, job: Job, attempt: Attempt) -> None: ...

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None: ...

    def waits_until(self, job: Job, at: float) -> None:
        """The job may not start before `at` (its not-before time)."""
        ...

    def settled(self, job: Job, result: JobResult, now: float) -> None: ...


class Journals:
    """Several journals as one, told in order."""

    def __init__(self, *journals: Journal) -> None:
        self._all = journals

    @contextmanager
    def batch(self) -> Iterator[None]:
        with ExitStack() as stack:
            for j in self._all:
                stack.enter_context(j.batch())
            yield

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        for j in self._all:
            j.attempt_started(job, number, now)

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        for j in self._all:
            j.attempt_placed(job, number, place, now)

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        for j in self._all:
            j.attempt_ended(job, attempt)

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        for j in self._all:
            j.requeued(job, at, retries_used, infra_used)

    def waits_until(self, job: Job, at: float) -> None:
        for j in self._all:
            j.waits_until(job, at)

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        for j in self._all:
            j.settled(job, result, now)
