"""A discrete-event simulator for the scheduling core: a fake clock, no threads, no I/O.

It drives `Scheduler` exactly as the engine does, with job outcomes from a function, so
schedules can be checked and measured at 10,000 jobs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from runner.core.events import (
    CancelRequested,
    Command,
    Event,
    JobFinished,
    JobRunning,
    KillJob,
    ScheduleTimer,
    StartJob,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job, JobResult, RunStatus
from runner.core.scheduler import Scheduler

# (job id, attempt number) -> (seconds it runs, failure kind or None for a pass)
Outcome = Callable[[str, int], tuple[float, FailureKind | None]]


@dataclass
class SimulationResult:
    makespan_s: float
    results: tuple[JobResult, ...]
    status: RunStatus
    max_running: int
    starts: list[tuple[float, str]] = field(default_factory=list)  # (time, job id) in order


def simulate(
    jobs: Sequence[Job],
    capacity: int,
    outcome: Outcome,
    *,
    run_timeout_s: float | None = None,
    cancel_at: float | None = None,
    start_time: float = 0.0,
) -> SimulationResult:
    """Run the core to completion on a fake clock."""
    core = Scheduler(jobs, capacity, run_timeout_s)
    queue: list[tuple[float, int, Event]] = []
    seq = itertools.count()
    running: dict[str, tuple[int, float]] = {}  # job -> (attempt, start)
    starts: list[tuple[float, str]] = []
    max_running = 0
    interrupted = False  # the cancel came before the run finished (the engine's flag)
    now = start_time

    def push(at: float, event: Event) -> None:
        heapq.heappush(queue, (at, next(seq), event))

    def apply(commands: list[Command]) -> None:
        nonlocal max_running
        for cmd in commands:
            if isinstance(cmd, StartJob):
                duration, failure = outcome(cmd.job_id, cmd.attempt)
                running[cmd.job_id] = (cmd.attempt, now)
                starts.append((now, cmd.job_id))
                push(now, JobRunning(cmd.job_id, cmd.attempt))  # no provisioning delay here
                max_running = max(max_running, len(running))
                push(now + duration, _finish(cmd.job_id, cmd.attempt, now, now + duration, failure))
            elif isinstance(cmd, KillJob):
                attempt, began = running[cmd.job_id]
                push(now, _finish(cmd.job_id, attempt, began, now, cmd.reason))
            elif isinstance(cmd, ScheduleTimer):
                push(cmd.at, TimerFired(cmd.token))

    if cancel_at is not None:
        push(cancel_at, CancelRequested("cancelled"))
    apply(core.start(now))
    while not core.done and queue:
        now, _, event = heapq.heappop(queue)
        if isinstance(event, (JobFinished, JobRunning)):
            number = event.attempt.number if isinstance(event, JobFinished) else event.attempt
            current = running.get(event.job_id)
            if current is None or current[0] != number:
                continue  # already killed and reported
            if isinstance(event, JobFinished):
                del running[event.job_id]
        interrupted = interrupted or isinstance(event, CancelRequested)
        apply(core.handle(event, now))
    status = core.status(interrupted)
    return SimulationResult(now - start_time, core.results(), status, max_running, starts)


def _finish(
    job_id: str, number: int, began: float, end: float, failure: FailureKind | None
) -> JobFinished:
    code = None if failure is not None and failure is not FailureKind.TEST_FAILURE else 0
    if failure is FailureKind.TEST_FAILURE:
        code = 1
    return JobFinished(job_id, Attempt(number, began, end, code, failure))
