"""The imperative shell: feeds events to the pure core and carries out its commands.

Each started attempt runs in a worker thread on the backend (acquire, run, release) and reports
back through one queue. Timers live here, on the injected clock. Whatever happens, `run()` gives
every place back (`backend.shutdown()`) and writes the reports, interrupted runs included.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path

from runner.attempt import AttemptRunner, Kill
from runner.backends.base import Backend, RentingBackend
from runner.console import Console
from runner.core.events import (
    CancelRequested,
    Command,
    Event,
    JobCompleted,
    JobFinished,
    JobRunning,
    KillJob,
    ScheduleTimer,
    StartJob,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job, Pipeline, RunRecord
from runner.core.retry import backoff_s
from runner.core.scheduler import Scheduler
from runner.errors import CloreRunError

# After a cancel, how long running attempts get to report before the engine settles them.
CANCEL_GRACE_S = 5.0
_TICK_S = 0.5  # the longest the loop sleeps before re-checking a cancel


@dataclass
class EngineOptions:
    out_dir: Path
    capacity: int
    workspace_root: Path | None = None
    workspace_files: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    backoff: Callable[[int], float] = backoff_s  # seconds before retry n (tests shorten it)


class Engine:
    """Runs one pipeline on one backend."""

    def __init__(
        self,
        pipeline: Pipeline,
        backend: Backend,
        options: EngineOptions,
        console: Console,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pipeline = pipeline
        self.backend = backend
        self.options = options
        self.console = console
        self.clock = clock
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._runner = AttemptRunner(
            backend,
            options.out_dir,
            clock,
            console,
            options.extra_env,
            options.workspace_root,
            options.workspace_files,
            on_placed=lambda job, number: self._events.put(JobRunning(job.id, number)),
        )
        self._timers: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._kill: dict[str, Kill] = {}
        # A pool sized to the cap: starting a thread per attempt costs milliseconds under a
        # busy GIL, which dominated short jobs.
        self._pool = _Workers(max(1, options.capacity))
        self._futures: list[Future[None]] = []
        self._started: dict[str, tuple[int, float]] = {}  # job -> (attempt, start time)
        self._placed: set[str] = set()  # jobs whose attempt holds a place (JobRunning seen)
        self._jobs = {j.id: j for j in pipeline.jobs}
        self.interrupted = False
        self._settled: set[str] = set()
        self._early: threading.Thread | None = None
        # Checked once: isinstance on a runtime Protocol is slow, and this is per event.
        self._renting = backend if isinstance(backend, RentingBackend) else None
        self._cancel_at: float | None = None

    def cancel(self, reason: str, interrupted: bool = True) -> None:
        """Ask the run to stop. Safe from a signal handler (SimpleQueue.put is reentrant)."""
        self.interrupted = self.interrupted or interrupted
        self._events.put(CancelRequested(reason))

    def run(self) -> RunRecord:
        started_at = self.clock()
        core = Scheduler(
            self.pipeline.jobs,
            self.options.capacity,
            self.pipeline.timeout_s,
            self.options.backoff,
        )
        try:
            self._apply(core.start(started_at), started_at)
            while not core.done:
                self._step(core)
        finally:
            self._settle_threads()
            if self._early is not None:
                self._early.join(timeout=CANCEL_GRACE_S)
            self._shutdown_backend()
        return RunRecord(
            pipeline=self.pipeline,
            results=core.results(),
            status=core.status(self.interrupted),
            started_at=started_at,
            finished_at=self.clock(),
            backend=self.backend.name,
            run_id=self.options.run_id,
            idle_cost_usd=self._renting.idle_cost_usd() if self._renting is not None else 0.0,
        )

    # -- the loop --------------------------------------------------------------------------

    def _step(self, core: Scheduler) -> None:
        now = self.clock()
        wait = _TICK_S
        if self._timers:
            wait = min(wait, max(0.0, self._timers[0][0] - now))
        try:
            event: Event | None = self._events.get(timeout=wait)
        except queue.Empty:
            event = None
        now = self.clock()
        if event is not None:
            if isinstance(event, JobFinished):
                self._started.pop(event.job_id, None)
                self._placed.discard(event.job_id)
                self.console.attempt_ended(self._jobs[event.job_id], event.attempt)
            elif isinstance(event, JobRunning):
                self._placed.add(event.job_id)
            self._apply(core.handle(event, now), now)
        while self._timers and self._timers[0][0] <= now:
            _, _, token = heapq.heappop(self._timers)
            self._apply(core.handle(TimerFired(token), now), now)
        # A request or the run's own timeout: either way, attempts get a grace period to stop.
        if self._cancel_at is None and core.cancel_reason is not None:
            self._cancel_at = now
            self.console.notice(f"cancelling: {core.cancel_reason}")
            self._give_back_early()
        if self._cancel_at is not None and now - self._cancel_at > CANCEL_GRACE_S:
            self._settle_stragglers(core, now)

    def _give_back_early(self) -> None:
        """A renting backend starts giving its servers back the moment a run is cancelled,
        beside the kills, so that all of it fits in GitHub's 7.5 s before SIGTERM."""
        if self._renting is not None:
            self._early = threading.Thread(target=self._shutdown_backend, daemon=True)
            self._early.start()

    def _shutdown_backend(self) -> None:
        """Give every place back. A failure here is reported, never raised: the run's reports
        must still be written (and a rental left open stays in the ledger for `cleanup`)."""
        try:
            self.backend.shutdown()
        except CloreRunError as exc:
            self.console.notice(f"warning: {exc}")
        except Exception as exc:
            self.console.notice(f"giving places back failed: {type(exc).__name__}: {exc}")

    def _settle_stragglers(self, core: Scheduler, now: float) -> None:
        """Attempts that did not stop when told are reported as cancelled; shutdown() frees
        their places."""
        for job_id, (number, began) in list(self._started.items()):
            attempt = Attempt(number, began, now, None, FailureKind.CANCELLED, "did not stop")
            self._started.pop(job_id)
            self._apply(core.handle(JobFinished(job_id, attempt), now), now)

    def _apply(self, commands: list[Command], now: float) -> None:
        if commands and self._renting is not None:
            self._renting.set_pending(self._pending_jobs(commands))
        for cmd in commands:
            if isinstance(cmd, StartJob):
                self._start(cmd, now)
            elif isinstance(cmd, KillJob):
                self._kill_job(cmd)
            elif isinstance(cmd, ScheduleTimer):
                heapq.heappush(self._timers, (cmd.at, next(self._seq), cmd.token))
                self._say_waiting(cmd)
            elif isinstance(cmd, JobCompleted):
                self.console.job_done(self._jobs[cmd.result.job_id], cmd.result)

    def _say_waiting(self, timer: ScheduleTimer) -> None:
        """A job waiting for a retry or for its `not-before` time: the console says until when."""
        token = timer.token
        if isinstance(token, tuple) and token[0] in ("retry", "not_before"):
            job = self._jobs[token[1]]
            if token[0] == "retry":
                self.console.requeued(job, timer.at)
            else:
                self.console.waiting_until(job, timer.at)

    def _pending_jobs(self, commands: list[Command]) -> list[Job]:
        """Jobs that may still ask for a place: not settled and not on one. A job starting now
        or still acquiring counts: the idle server it is about to take must not be given back
        under it."""
        for cmd in commands:
            if isinstance(cmd, JobCompleted):
                self._settled.add(cmd.result.job_id)
        busy = self._settled | self._placed
        return [j for j in self.pipeline.jobs if j.id not in busy]

    def _kill_job(self, cmd: KillJob) -> None:
        event = self._kill.get(cmd.job_id)
        if event is not None:
            event.stop(cmd.reason)

    # -- workers ---------------------------------------------------------------------------

    def _start(self, cmd: StartJob, now: float) -> None:
        job = self._jobs[cmd.job_id]
        kill = Kill()
        self._kill[job.id] = kill
        self._started[job.id] = (cmd.attempt, now)
        self.console.job_started(job, cmd.attempt)
        self._futures = [f for f in self._futures if not f.done()]
        work = functools.partial(self._work, job, cmd.attempt, cmd.timeout_s, kill)
        self._futures.append(self._pool.submit(work))

    def _work(self, job: Job, number: int, timeout_s: float, kill: Kill) -> None:
        ran = self._runner.run(job, number, timeout_s, kill)
        self._events.put(JobFinished(job.id, ran.attempt))
        if ran.stop_reason:  # after the finish, so this job ends as `error`, not as cancelled
            self.cancel(ran.stop_reason, interrupted=False)

    def _settle_threads(self) -> None:
        grace = CANCEL_GRACE_S
        if self._cancel_at is not None:
            # What is left of the grace the cancel gave: not a second one after it, which
            # would overrun the time CI allows between SIGINT and SIGKILL.
            grace = max(0.0, self._cancel_at + CANCEL_GRACE_S - self.clock())
        wait(self._futures, timeout=grace)
        self._pool.shutdown()


class _Workers:
    """At most `size` daemon threads running the submitted calls, a Future for each.

    Not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so an attempt
    stuck in a backend that ignores its cancel would keep clore-run from exiting after the run
    had already settled it and written its reports."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)

    def submit(self, call: Callable[[], None]) -> Future[None]:
        """Called from one thread only (the engine's loop)."""
        future: Future[None] = Future()
        self._tasks.put((call, future))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
            name = f"job_{len(self._threads)}"
            thread = threading.Thread(target=self._serve, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return future

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            call, future = task
            if future.set_running_or_notify_cancel():
                try:
                    call()
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(None)
            self._idle.release()

    def shutdown(self) -> None:
        """Cancel what has not started; idle threads end, busy ones when their call returns."""
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[1].cancel()
        for _ in self._threads:
            self._tasks.put(None)
