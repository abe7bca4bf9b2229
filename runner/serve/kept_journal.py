"""A journal that never raises into the driver: what the store refuses is kept, not lost.

A failed write inside the driver's loop used to leave the core's state and its workers apart:
an ended attempt stayed `running` in the store forever, and the start in the same batch was
never handed to a worker, so its slot was held by nothing (a full disk did it). Here each
batch is written as one transaction and tried again; when the store still refuses it, the
writes are kept in order to go first with the next batch, `failure` says why meanwhile (for
/healthz), and an attempt whose start could not be written is told to the service, which ends
it as an infrastructure failure: recovery after a crash could not know of it. The service
also calls `retry()` on a timer while writes are kept (`on_kept` tells it when), so a store
that writes again catches up without waiting for a new submission.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runner.backends.base import Place
from runner.core.model import Attempt, Job, JobResult
from runner.engine.journal import Journal
from runner.stores.queue import QueueError

log = logging.getLogger("clore_run.serve")

# A refused batch is tried again after these waits (a log rotation or a vacuum may free room).
RETRY_WAITS_S = (0.05, 0.25)
MAX_KEPT = 100_000  # writes kept for when the store writes again (the newest, past that)

Write = Callable[[], None]
UnrecordedStart = Callable[[str, int, str], None]  # job id, attempt number, why


def _nobody(job_id: str, number: int, why: str) -> None:
    return None


class KeptJournal:
    """Wraps a store's journal; same calls, none of them raises a QueueError."""

    def __init__(
        self,
        inner: Journal,
        on_unrecorded_start: UnrecordedStart = _nobody,
        sleep: Callable[[float], None] = time.sleep,
        on_kept: Callable[[], None] = lambda: None,
    ) -> None:
        self.inner = inner
        self.on_unrecorded_start = on_unrecorded_start
        self.sleep = sleep
        self.on_kept = on_kept  # writes are kept: call retry() later
        self.failure: str | None = None  # the store's last refusal, until a write lands
        self._batch: list[tuple[Write, tuple[str, int] | None]] | None = None
        self._kept: list[Write] = []

    @contextmanager
    def batch(self) -> Iterator[None]:
        if self._batch is not None:
            yield  # nested: joins the outer batch
            return
        self._batch = []
        try:
            yield
            writes = self._batch
        finally:
            self._batch = None
        self._flush(writes)

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        self.write(
            functools.partial(self.inner.attempt_started, job, number, now), (job.id, number)
        )

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        self.write(functools.partial(self.inner.attempt_placed, job, number, place, now))

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        self.write(functools.partial(self.inner.attempt_ended, job, attempt))

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        self.write(functools.partial(self.inner.requeued, job, at, retries_used, infra_used))

    def waits_until(self, job: Job, at: float) -> None:
        self.write(functools.partial(self.inner.waits_until, job, at))

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.write(functools.partial(self.inner.settled, job, result, now))

    def write(self, write: Write, start: tuple[str, int] | None = None) -> None:
        """Do `write` now (or with the batch around it); kept for later if the store refuses."""
        if self._batch is not None:
            self._batch.append((write, start))
        else:
            self._flush([(write, start)])

    def retry(self) -> None:
        """Try the kept writes once more (on the thread that writes the rest)."""
        if self._kept and self._batch is None:
            self._flush([], waits_s=())

    def _flush(
        self,
        writes: list[tuple[Write, tuple[str, int] | None]],
        waits_s: tuple[float, ...] = RETRY_WAITS_S,
    ) -> None:
        pending = [*self._kept, *(w for w, _ in writes)]
        if not pending:
            return
        refusal = ""
        for wait_s in (0.0, *waits_s):
            if wait_s:
                self.sleep(wait_s)
            try:
                with self.inner.batch():
                    for write in pending:
                        write()
            except QueueError as exc:
                refusal = exc.message
                continue
            if self.failure is not None:
                log.warning("the queue database writes again (%d changes caught up)", len(pending))
            self._kept, self.failure = [], None
            return
        if self.failure is None:
            log.error("%s: keeping the changes until it writes again", refusal)
        self.failure = refusal
        self._kept = pending[-MAX_KEPT:]
        self.on_kept()
        why = f"the queue database cannot record this attempt: {refusal}"
        for _, start in writes:
            if start is not None:
                self.on_unrecorded_start(start[0], start[1], why)
