"""What the scheduling core hears (events) and says (commands). Times are passed in."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from runner.core.model import Attempt, FailureKind, JobResult

# -- events: fed to Scheduler.handle(event, now) -----------------------------------------------


@dataclass(frozen=True)
class JobFinished:
    """An attempt ended (passed, failed, or was killed). `attempt.number` names the attempt."""

    job_id: str
    attempt: Attempt


@dataclass(frozen=True)
class JobRunning:
    """The attempt has its place and its script starts now: its timeout counts from here, so
    renting and booting a server never eat into the job's own time."""

    job_id: str
    attempt: int


@dataclass(frozen=True)
class TimerFired:
    """A timer the core asked for came due. Stale timers are ignored by the core."""

    token: Hashable


@dataclass(frozen=True)
class CancelRequested:
    """Stop: start nothing more, kill what runs (Ctrl-C, SIGTERM, run timeout)."""

    reason: str


Event = JobFinished | JobRunning | TimerFired | CancelRequested

# -- commands: returned by the core, carried out by the engine ---------------------------------


@dataclass(frozen=True)
class StartJob:
    job_id: str
    attempt: int  # 1-based
    timeout_s: float


@dataclass(frozen=True)
class KillJob:
    job_id: str
    reason: FailureKind  # TIMEOUT or CANCELLED


@dataclass(frozen=True)
class ScheduleTimer:
    at: float
    token: Hashable


@dataclass(frozen=True)
class JobCompleted:
    """A job reached its final status (for progress display; nothing to carry out)."""

    result: JobResult


Command = StartJob | KillJob | ScheduleTimer | JobCompleted
