"""A discrete-event simulator for the scheduling core: a fake clock, no threads, no I/O.

It drives `Scheduler` as the driver does, with job outcomes from a function, so schedules can
be checked and measured at 10,000 jobs. Two ways to hand the jobs over, as the two commands do:
`run` adds the whole set at once; `serve` gets jobs over time (here: a job with needs arrives
only once they have all settled, and the core has forgotten them), so tests can check that both
decide the same.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    CancelAll,
    Command,
    Event,
    KillAttempt,
    SetTimer,
    Settled,
    StartAttempt,
    StopCause,
    TimerFired,
)
from runner.core.model import Attempt, FailureKind, Job, JobResult, RunStatus
from runner.core.outcome import need_outcome, ordered, run_status
from runner.core.scheduler import Scheduler

# (job id, attempt number) -> (seconds it runs, failure kind or None for a pass)
Outcome = Callable[[str, int], tuple[float, FailureKind | None]]
Arrival = Literal["at_once", "over_time"]


@dataclass
class SimulationResult:
    makespan_s: float
    results: tuple[JobResult, ...]
    status: RunStatus
    max_running: int
    starts: list[tuple[float, str]] = field(default_factory=list)  # (time, job id) in order


@dataclass
class _Sim:
    core: Scheduler
    jobs: Sequence[Job]
    outcome: Outcome
    now: float
    place_s: float
    queue: list[tuple[float, int, Event]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    running: dict[str, tuple[int, float]] = field(default_factory=dict)  # job -> (attempt, start)
    results: dict[str, JobResult] = field(default_factory=dict)
    late: dict[str, set[str]] = field(default_factory=dict)  # job -> needs it arrives after
    late_by_need: dict[str, list[Job]] = field(default_factory=dict)
    starts: list[tuple[float, str]] = field(default_factory=list)
    max_running: int = 0

    def __post_init__(self) -> None:
        self.by_id = {j.id: j for j in self.jobs}

    def arrive_late(self) -> list[Job]:
        """Jobs with needs arrive once those settled; the others are handed over now."""
        for job in self.jobs:
            if job.needs:
                self.late[job.id] = set(job.needs)
                for need in self.late[job.id]:
                    self.late_by_need.setdefault(need, []).append(job)
        return [j for j in self.jobs if not j.needs]

    def push(self, at: float, event: Event) -> None:
        heapq.heappush(self.queue, (at, next(self.seq), event))

    def apply(self, commands: list[Command]) -> None:
        todo = commands  # arrivals append to it: a work list, not recursion
        i = 0
        while i < len(todo):
            cmd = todo[i]
            i += 1
            if isinstance(cmd, StartAttempt):
                self._start(cmd)
            elif isinstance(cmd, KillAttempt):
                attempt, began = self.running[cmd.job_id]
                self.push(self.now, _ended(cmd.job_id, attempt, began, self.now, cmd.reason))
            elif isinstance(cmd, SetTimer):
                self.push(cmd.at, TimerFired(cmd.token))
            elif isinstance(cmd, Settled):
                self.results[cmd.result.job_id] = cmd.result
                todo.extend(self._arrivals(cmd.result.job_id))

    def _start(self, cmd: StartAttempt) -> None:
        duration, failure = self.outcome(cmd.job_id, cmd.attempt)
        began = self.now + self.place_s
        self.running[cmd.job_id] = (cmd.attempt, began)
        self.starts.append((self.now, cmd.job_id))
        self.push(began, AttemptPlaced(cmd.job_id, cmd.attempt))
        self.max_running = max(self.max_running, len(self.running))
        end = began + duration
        self.push(end, _ended(cmd.job_id, cmd.attempt, began, end, failure))

    def _arrivals(self, settled_id: str) -> list[Command]:
        """Jobs that were waiting for `settled_id` to settle before being submitted."""
        arrived = []
        for job in self.late_by_need.pop(settled_id, []):
            waits = self.late[job.id]
            waits.discard(settled_id)
            if not waits:
                del self.late[job.id]
                arrived.append(job)
        if not arrived:
            return []
        settled = {
            n: need_outcome(self.by_id[n], self.results[n]) for j in arrived for n in j.needs
        }
        return self.core.add(arrived, settled, self.now)


def simulate(
    jobs: Sequence[Job],
    capacity: int,
    outcome: Outcome,
    *,
    run_timeout_s: float | None = None,
    cancel_at: float | None = None,
    start_time: float = 0.0,
    arrival: Arrival = "at_once",
    place_s: float = 0.0,
) -> SimulationResult:
    """Run the core to completion on a fake clock. `place_s`: how long getting a place takes
    (renting and booting), before the script starts."""
    sim = _Sim(Scheduler(capacity), jobs, outcome, start_time, place_s)
    if cancel_at is not None:
        sim.push(cancel_at, CancelAll("cancelled", StopCause.INTERRUPTED))
    if run_timeout_s is not None:
        reason = f"the run timed out after {run_timeout_s:g} s"
        sim.push(start_time + run_timeout_s, CancelAll(reason, StopCause.TIMED_OUT))
    first = sim.arrive_late() if arrival == "over_time" else jobs
    sim.apply(sim.core.add(first, {}, sim.now))
    while not sim.core.idle and sim.queue:
        sim.now, _, event = heapq.heappop(sim.queue)
        if isinstance(event, AttemptEnded):
            current = sim.running.get(event.job_id)
            if current is None or current[0] != event.attempt.number:
                continue  # already killed and reported
            del sim.running[event.job_id]
        sim.apply(sim.core.handle(event, sim.now))
    status = run_status(sim.results.values(), sim.by_id, sim.core.stop_cause)
    results = ordered(sim.results.values(), jobs)
    return SimulationResult(sim.now - start_time, results, status, sim.max_running, sim.starts)


def _ended(
    job_id: str, number: int, began: float, end: float, failure: FailureKind | None
) -> AttemptEnded:
    code = None if failure is not None and failure is not FailureKind.TEST_FAILURE else 0
    if failure is FailureKind.TEST_FAILURE:
        code = 1
    return AttemptEnded(job_id, Attempt(number, began, end, code, failure))
