"""Event-driven list scheduling of a pipeline's jobs, pure and deterministic.

Like graphlib's get_ready()/done(): indegree counters and a ready heap, so a whole run costs
O((V + E) log V) and nothing rescans all jobs per event. Ready jobs go by user priority, then
longest remaining critical path (HEFT upward rank), then file order. Only *ready* jobs are in the
heap, so a high-priority job waiting on its needs never holds back a lower one that could run.

The core never reads a clock and does no I/O: it is fed events with the time and answers with
commands. The real engine and the simulator drive the same code.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from runner.core import graph
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
from runner.core.model import (
    Attempt,
    Condition,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    RunStatus,
)
from runner.core.retry import RETRY_TABLE, backoff_s, should_retry

_BAD = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR, JobStatus.CANCELLED})
_WORD = {
    JobStatus.FAILED: "failed",
    JobStatus.TIMED_OUT: "timed out",
    JobStatus.ERROR: "hit an infrastructure error",
    JobStatus.CANCELLED: "was cancelled",
    JobStatus.SKIPPED: "was skipped",
}


@dataclass
class _Running:
    attempt: int
    started_at: float
    kill_reason: FailureKind | None = None
    kill_message: str = ""


class Scheduler:
    """Schedules one run. Call `start(now)` once, then `handle(event, now)` per event."""

    def __init__(
        self,
        jobs: Sequence[Job],
        capacity: int,
        run_timeout_s: float | None = None,
        backoff: Callable[[int], float] = backoff_s,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.run_timeout_s = run_timeout_s
        self._backoff = backoff
        self._jobs = {j.id: j for j in jobs}
        self._order = [j.id for j in jobs]
        needs = {j.id: j.needs for j in jobs}
        topo = graph.topological_order(needs)
        self._dependents = graph.dependents_of(needs)
        rank = graph.upward_ranks(needs, lambda i: self._jobs[i].duration_hint_s, topo)
        self._key = {j.id: (-int(j.priority), -rank[j.id], j.index) for j in jobs}
        self._pending = {j.id: len(j.needs) for j in jobs}
        self._groups: dict[str, list[str]] = {}
        for j in jobs:
            self._groups.setdefault(j.group or j.id, []).append(j.id)
        self._ready: list[tuple[tuple[int, float, int], str]] = []
        self._running: dict[str, _Running] = {}
        self._attempts: dict[str, list[Attempt]] = {j.id: [] for j in jobs}
        self._retries_used = dict.fromkeys(self._jobs, 0)
        self._infra_used = dict.fromkeys(self._jobs, 0)
        self._results: dict[str, JobResult] = {}
        self._tainted: set[str] = set()  # failed, or skipped/cancelled because of a failure
        self._cancel_reason: str | None = None
        self._timed_out = False
        self._out: list[Command] = []
        self._now = 0.0

    # -- public ----------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return len(self._results) == len(self._jobs)

    @property
    def cancel_reason(self) -> str | None:
        """Why the run is being cancelled (a request, or the run's timeout); None while not."""
        return self._cancel_reason

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._running)

    def results(self) -> tuple[JobResult, ...]:
        """Final results in pipeline order (jobs not finished yet are left out)."""
        return tuple(self._results[i] for i in self._order if i in self._results)

    def status(self, interrupted: bool = False) -> RunStatus:
        """The run's outcome: a real test failure outranks an infrastructure error."""
        if interrupted:
            return RunStatus.INTERRUPTED
        counted = [r for r in self._results.values() if not self._jobs[r.job_id].continue_on_error]
        if self._timed_out or any(
            r.status in (JobStatus.FAILED, JobStatus.TIMED_OUT) for r in counted
        ):
            return RunStatus.FAILED
        # A cancel that is neither an interrupt nor the run's timeout came from the
        # infrastructure (the key refused...): the jobs it cancelled did not pass.
        if any(r.status is JobStatus.ERROR for r in counted) or self._cancel_reason is not None:
            return RunStatus.ERROR
        return RunStatus.PASSED

    def start(self, now: float) -> list[Command]:
        self._now = now
        if self.run_timeout_s is not None:
            self._out.append(ScheduleTimer(now + self.run_timeout_s, ("run_timeout",)))
        # Take the roots first: settling one (a failure() job skipped at once) readies its
        # dependents, which must not be queued a second time by this loop.
        for job_id in [i for i in self._order if self._pending[i] == 0]:
            self._needs_done(job_id, now)
        return self._flush(now)

    def handle(self, event: Event, now: float) -> list[Command]:
        self._now = now
        if isinstance(event, JobFinished):
            self._finished(event.job_id, event.attempt, now)
        elif isinstance(event, JobRunning):
            self._script_started(event.job_id, event.attempt, now)
        elif isinstance(event, TimerFired):
            self._timer(event.token, now)
        elif isinstance(event, CancelRequested):
            self._cancel(event.reason)
        return self._flush(now)

    # -- events ----------------------------------------------------------------------------

    def _finished(self, job_id: str, attempt: Attempt, now: float) -> None:
        run = self._running.get(job_id)
        if run is None or run.attempt != attempt.number:
            return  # a stale report (e.g. after a cancel already settled the job)
        del self._running[job_id]
        if attempt.failure is not None and run.kill_reason is not None:
            attempt = replace(attempt, failure=run.kill_reason, message=run.kill_message)
        self._attempts[job_id].append(attempt)
        kind = attempt.failure
        if kind is None:
            self._finalize(job_id, JobStatus.PASSED, "")
            return
        job = self._jobs[job_id]
        rule = RETRY_TABLE[kind]
        if self._cancel_reason is None and should_retry(
            kind, self._retries_used[job_id], job.retries, self._infra_used[job_id]
        ):
            if rule.spends_retries:
                self._retries_used[job_id] += 1
            else:
                self._infra_used[job_id] += 1
            failures = len(self._attempts[job_id])
            self._out.append(ScheduleTimer(now + self._backoff(failures), ("retry", job_id)))
            return
        reason = attempt.message or kind.value
        self._finalize(job_id, rule.final_status, reason)

    def _script_started(self, job_id: str, number: int, now: float) -> None:
        run = self._running.get(job_id)
        if run is not None and run.attempt == number and run.kill_reason is None:
            timeout = self._jobs[job_id].timeout_s
            self._out.append(ScheduleTimer(now + timeout, ("timeout", job_id, number)))

    def _kill(self, job_id: str, run: _Running, reason: FailureKind, message: str) -> None:
        if run.kill_reason is None:
            run.kill_reason, run.kill_message = reason, message
            self._out.append(KillJob(job_id, reason))

    def _timer(self, token: Hashable, now: float) -> None:
        if not isinstance(token, tuple) or not token:
            return
        kind = token[0]
        if kind == "timeout":
            _, job_id, number = token
            run = self._running.get(job_id)
            if run is not None and run.attempt == number:
                limit = self._jobs[job_id].timeout_s
                self._kill(job_id, run, FailureKind.TIMEOUT, f"timed out after {limit:g} s")
        elif kind in ("not_before", "retry"):
            job_id = token[1]
            if job_id not in self._results and job_id not in self._running:
                heapq.heappush(self._ready, (self._key[job_id], job_id))
        elif kind == "run_timeout" and not self.done:  # a run that finished did not time out
            self._timed_out = True
            self._cancel(f"the run timed out after {self.run_timeout_s or 0:g} s")

    def _cancel(self, reason: str) -> None:
        if self._cancel_reason is not None:
            return
        self._cancel_reason = reason
        self._ready.clear()
        for job_id, run in self._running.items():
            self._kill(job_id, run, FailureKind.CANCELLED, reason)
        for job_id in self._order:
            if job_id not in self._results and job_id not in self._running:
                self._finalize(job_id, JobStatus.CANCELLED, reason)

    # -- transitions -----------------------------------------------------------------------

    def _needs_done(self, job_id: str, now: float) -> None:
        """All needs are final: run the job, or settle it as skipped/cancelled."""
        if job_id in self._results:
            return
        if self._cancel_reason is not None:
            self._finalize(job_id, JobStatus.CANCELLED, self._cancel_reason)
            return
        job = self._jobs[job_id]
        bad = [n for n in job.needs if n in self._tainted]
        # As in GitHub Actions, success() needs every need to have passed: a need that was
        # skipped for any reason (also a failure() job with nothing to handle) skips it too.
        unmet = [n for n in job.needs if not self._succeeded(n)]
        if job.condition is Condition.SUCCESS and unmet:
            need = unmet[0]
            word = _WORD.get(self._results[need].status, "failed")
            # Skipped because of a failure upstream: failure() jobs further down still run.
            skipped = f"needs '{need}', which {word}"
            self._finalize(job_id, JobStatus.SKIPPED, skipped, tainted=bool(bad))
            return
        if job.condition is Condition.FAILURE and not bad:
            self._finalize(
                job_id, JobStatus.SKIPPED, "runs on failure(), and nothing it needs failed"
            )
            return
        if job.not_before is not None and now < job.not_before:
            self._out.append(ScheduleTimer(job.not_before, ("not_before", job_id)))
            return
        heapq.heappush(self._ready, (self._key[job_id], job_id))

    def _succeeded(self, job_id: str) -> bool:
        status = self._results[job_id].status
        return status is JobStatus.PASSED or (
            self._jobs[job_id].continue_on_error and status in _BAD
        )

    def _finalize(self, job_id: str, status: JobStatus, reason: str, tainted: bool = False) -> None:
        job = self._jobs[job_id]
        result = JobResult(job_id, status, reason, tuple(self._attempts[job_id]))
        self._results[job_id] = result
        self._out.append(JobCompleted(result))
        failed = status in _BAD and not job.continue_on_error
        if failed or tainted:
            self._tainted.add(job_id)
        if failed and status is not JobStatus.CANCELLED and job.fail_fast and job.matrix:
            self._fail_fast(job)
        for child in self._dependents[job_id]:
            self._pending[child] -= 1
            if self._pending[child] == 0:
                self._needs_done(child, self._now)

    def _fail_fast(self, failed: Job) -> None:
        reason = f"fail-fast: '{failed.id}' failed"
        for sibling in self._groups[failed.group or failed.id]:
            if sibling in self._results:
                continue
            run = self._running.get(sibling)
            if run is None:
                self._finalize(sibling, JobStatus.CANCELLED, reason)
            else:
                self._kill(sibling, run, FailureKind.CANCELLED, reason)

    def _flush(self, now: float) -> list[Command]:
        """Start ready jobs while there is capacity; hand back the commands gathered."""
        while self._ready and len(self._running) < self.capacity:
            _, job_id = heapq.heappop(self._ready)
            if job_id in self._results or job_id in self._running:
                continue
            job = self._jobs[job_id]
            number = len(self._attempts[job_id]) + 1
            self._running[job_id] = _Running(number, now)
            self._out.append(StartJob(job_id, number, job.timeout_s))
        out, self._out = self._out, []
        return out
