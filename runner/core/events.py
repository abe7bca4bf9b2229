"""What the scheduling core hears (events) and says (commands). Times are passed in.

An attempt is one try at a job; a job is *settled* when it reaches its final status, after one
or more attempts (or none: skipped, cancelled while waiting). The two are different events and
are named apart: `AttemptEnded` comes in from the driver, `AttemptRecorded` and `Settled` go out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from runner.core.model import Attempt, FailureKind, JobResult

# -- events: fed to Scheduler.handle(event, now) -----------------------------------------------


@dataclass(frozen=True)
class AttemptPlaced:
    """The attempt holds a place and its script starts now: the job's timeout counts from
    here, so renting and booting a server never eat into the job's own time."""

    job_id: str
    attempt: int


@dataclass(frozen=True)
class AttemptEnded:
    """An attempt ended (passed, failed, or was killed). `attempt.number` names it."""

    job_id: str
    attempt: Attempt


@dataclass(frozen=True)
class AttemptTimeout:
    """A timer's token: attempt `number` of the job has run its time (stale if it ended)."""

    job_id: str
    number: int


@dataclass(frozen=True)
class Wake:
    """A timer's token: the job's wait for a time (not-before, a retry's backoff) is over."""

    job_id: str


@dataclass(frozen=True)
class HoldOver:
    """A timer's token: the hold on starting (HoldStarts) is over."""


@dataclass(frozen=True)
class RunTimeout:
    """A timer's token: the whole run's time is up."""


class BookWake(str, enum.Enum):
    """What a server book's timer makes it look at again."""

    AHEAD = "ahead"  # a job's rent-ahead time: rent its server now (of: the job)
    LOOK = "look"  # an idle server's paid time ends: keep it or give it back (of: the server)
    HEDGE = "hedge"  # a boot is late: hedge it (of: the server)
    HOLD = "hold"  # the budget's hold on renting is over (of: 0)
    DAY = "day"  # a new UTC day of a daily budget (of: the day's number)
    WARM = "warm"  # a warm window opens or closes (of: the time, in whole seconds)


@dataclass(frozen=True)
class BookTimer:
    """A timer's token: the server book's, `what` about `of`."""

    what: BookWake
    of: str | int


TimerToken = AttemptTimeout | Wake | HoldOver | RunTimeout | BookTimer


@dataclass(frozen=True)
class TimerFired:
    """A timer the core asked for came due. Stale timers are ignored by the core."""

    token: TimerToken


@dataclass(frozen=True)
class CancelJob:
    """Cancel one job: settled at once while it waits, killed while it runs."""

    job_id: str
    reason: str


class StopCause(str, enum.Enum):
    """Why a whole run is being stopped; decides the run's status."""

    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM: exit 130
    TIMED_OUT = "timed_out"  # the run's own timeout: a failure
    INFRASTRUCTURE = "infrastructure"  # the backend said nothing can run (key refused...)


@dataclass(frozen=True)
class CancelAll:
    """Stop everything: start nothing more, kill what runs, settle the rest as cancelled."""

    reason: str
    cause: StopCause


@dataclass(frozen=True)
class HoldStarts:
    """Start nothing before `until` (jobs already running go on). A longer hold in place stays."""

    until: float


Event = AttemptPlaced | AttemptEnded | TimerFired | CancelJob | CancelAll | HoldStarts

# -- commands: returned by the core, carried out by the driver ---------------------------------


@dataclass(frozen=True)
class StartAttempt:
    """Start the job's next attempt, killed after `timeout_s` from its placement."""

    job_id: str
    attempt: int  # 1-based
    timeout_s: float


@dataclass(frozen=True)
class KillAttempt:
    """Stop the job's running attempt, which ends as `reason`."""

    job_id: str
    reason: FailureKind  # TIMEOUT or CANCELLED


@dataclass(frozen=True)
class SetTimer:
    """Feed `TimerFired(token)` back to the core at `at`."""

    at: float
    token: TimerToken


@dataclass(frozen=True)
class AttemptRecorded:
    """An attempt as the core counts it (a kill's reason applied): to journal."""

    job_id: str
    attempt: Attempt


@dataclass(frozen=True)
class Requeued:
    """The job waits until `at` for another attempt, with these retry counters."""

    job_id: str
    at: float
    retries_used: int
    infra_used: int


@dataclass(frozen=True)
class Settled:
    """The job reached its final status; the core forgets it."""

    result: JobResult


Command = StartAttempt | KillAttempt | SetTimer | AttemptRecorded | Requeued | Settled
