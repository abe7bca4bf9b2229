"""`clore-run run`'s use of the driver: one pipeline, one `add()`, then until idle.

Its journal is the console and the results the reports are written from; the run's status is a
fold over those results. Whatever happens, `run()` gives every place back (`backend.shutdown()`)
and returns a record the reports can be written from, interrupted runs included.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from runner.backends.base import Backend, BackendStage, Place, RentingBackend
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.events import CancelAll, Event, StopCause
from runner.core.model import Attempt, Job, JobResult, Pipeline, RunRecord
from runner.core.outcome import ordered, run_status
from runner.core.placing import PlacingCore
from runner.core.retry import backoff_s
from runner.engine.attempt import AttemptRunner
from runner.engine.console import Console
from runner.engine.driver import Driver, DriverOptions
from runner.engine.journal import Journal, Journals
from runner.engine.server_book import book_for


def new_run_id() -> str:
    """12 random hex digits: a run's name in logs, ledgers and reports."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class RunSettings:
    """Where a run writes and how many jobs it runs at once, and what every job gets."""

    out_dir: Path
    capacity: int
    workspace_root: Path | None = None
    workspace_files: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=new_run_id)
    backoff: Callable[[int], float] = backoff_s  # seconds before retry n (tests shorten it)
    # Seconds each job took before (a baseline run), for rent-ahead where it has no estimate.
    durations_s: Mapping[str, float] = field(default_factory=dict)


_NO_BATCH = nullcontext()  # holds no state: one serves every batch, nested or not


class ConsoleJournal:
    """The run as a person watching sees it, and the settled results for the reports."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.results: list[JobResult] = []

    def batch(self) -> AbstractContextManager[None]:
        return _NO_BATCH  # nothing to group: one made per event would be garbage

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        self.console.job_started(job, number)

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        return None  # the attempt runner shows the place on the console as it gets it

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        self.console.attempt_ended(job, attempt)

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        self.console.requeued(job, at)

    def waits_until(self, job: Job, at: float) -> None:
        self.console.waiting_until(job, at)

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.results.append(result)
        self.console.job_done(job, result)


def _stop_run(reason: str, _now: float) -> Event:
    """The backend says nothing can run (key refused, no balance): the run stops, as an
    infrastructure error."""
    return CancelAll(reason, StopCause.INFRASTRUCTURE)


class PipelineRun:
    """Runs one pipeline on one backend."""

    def __init__(
        self,
        pipeline: Pipeline,
        backend: Backend,
        settings: RunSettings,
        console: Console,
        clock: Clock = SYSTEM_CLOCK,
        journals: Sequence[Journal] = (),
    ) -> None:
        self.pipeline = pipeline
        self.backend = backend
        self.settings = settings
        self.clock = clock
        # The run starts now: reading the market (below) can take as long as the API makes it
        # wait, and the reports' duration must count that.
        self.started_at = clock.time()
        self.journal = ConsoleJournal(console)
        runner = AttemptRunner(
            backend,
            settings.out_dir,
            clock,
            console,
            settings.extra_env,
            settings.workspace_root,
            settings.workspace_files,
        )
        # The core decides which server runs which job (and, on Clore, which to rent and
        # give back); the backend carries that out.
        book = book_for(
            backend,
            pipeline.jobs,
            settings.capacity,
            clock.time(),
            pipeline.budget_usd,
            pipeline.provisioning,
            settings.durations_s,
        )
        core = PlacingCore(pipeline.jobs, book, backoff=settings.backoff)
        self.interrupted = False  # a signal came: the run ends as interrupted
        self.driver = Driver(
            core,
            backend,
            runner,
            # The console alone (every `run`): told directly, not through a loop over one.
            Journals(self.journal, *journals) if journals else self.journal,
            clock,
            DriverOptions(
                must_stop=_stop_run,
                notice=console.notice,
                rent_stages=lambda job: _RentStages(console, job),
            ),
        )

    def cancel(self, reason: str) -> None:
        """Ask the run to stop (Ctrl-C, SIGTERM). Safe from a signal handler. Also once the
        jobs are over: giving the servers back then stops waiting for confirmations."""
        self.interrupted = True
        if isinstance(self.backend, RentingBackend):
            self.backend.stop_soon()
        self.driver.cancel(reason, StopCause.INTERRUPTED)

    def run(self, before_give_back: Callable[[RunRecord], None] | None = None) -> RunRecord:
        """`before_give_back` gets the record once every job has ended, before a renting
        backend gives its servers back: a slow API makes that the slow part of a cancel, and
        CI's SIGKILL must not find the run without reports."""
        started_at = self.started_at
        try:
            self.driver.add(self.pipeline.jobs, {}, self.clock.time())
            self.driver.run_until_idle(self.pipeline.timeout_s)
        finally:
            self.driver.finish_work()
            try:
                if before_give_back is not None and isinstance(self.backend, RentingBackend):
                    before_give_back(self._record(started_at))
            finally:
                self.driver.give_back()
        return self._record(started_at)

    def _record(self, started_at: float) -> RunRecord:
        jobs = {j.id: j for j in self.pipeline.jobs}
        results = ordered(self.journal.results, self.pipeline.jobs)
        renting = self.backend if isinstance(self.backend, RentingBackend) else None
        return RunRecord(
            pipeline=self.pipeline,
            results=results,
            status=run_status(results, jobs, self.driver.core.stop_cause),
            started_at=started_at,
            finished_at=self.clock.time(),
            backend=self.backend.name,
            run_id=self.settings.run_id,
            idle_cost_usd=renting.idle_cost_usd() if renting is not None else 0.0,
        )


class _RentStages:
    """A rent's stages on the console, for the ready job it is meant for: the server is rented
    before the job's attempt (and its log) exists, and the live view should say so."""

    __slots__ = ("console", "job")

    def __init__(self, console: Console, job: Job) -> None:
        self.console, self.job = console, job

    def stage(
        self, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None:
        self.console.stage(self.job, stage, detail, usd_per_hour)

    def note(self, text: str) -> None:
        self.console.note(self.job, text)
