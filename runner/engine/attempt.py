"""One attempt of one job on a server the core chose: place, run, done, log, what it cost.

The driver runs every attempt of `clore-run run` and `clore-run serve` this way, with one
mapping of backend errors to failure kinds.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.backends.base import AttemptBill, Backend, Place, RunOutcome, RunRequest
from runner.clock import Clock
from runner.core.model import Attempt, FailureKind, Job
from runner.errors import CloreRunError, JobCannotRun, RunMustStop, local_fault_from
from runner.joblog import AttemptConsole, JobLog


def _nothing(_place: Place) -> None:
    return None


def _as_killed(outcome: RunOutcome, kill: threading.Event, timeout_s: float) -> RunOutcome:
    """A cancel the core sent for a timeout is a timeout."""
    reason = kill.reason if isinstance(kill, Kill) else None
    if reason is FailureKind.TIMEOUT and outcome.failure is FailureKind.CANCELLED:
        message = f"timed out after {timeout_s:g} s"
        return RunOutcome(outcome.exit_code, FailureKind.TIMEOUT, message, outcome.facts)
    if isinstance(kill, Kill) and kill.note and reason and outcome.failure is FailureKind.CANCELLED:
        return RunOutcome(outcome.exit_code, reason, kill.note, outcome.facts)
    return outcome


# A local file error that another server cannot cure: the job fails once, without renting
# again (each new server costs its fee). Anything else stays an infrastructure failure.
_LOCAL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def _local_outcome(exc: OSError) -> RunOutcome:
    """An OSError that reached the attempt: backends wrap the network's, so it is ours."""
    if exc.errno in _LOCAL_ERRNOS:
        return RunOutcome(None, FailureKind.UNAVAILABLE, str(local_fault_from(exc, "cannot write")))
    return RunOutcome(None, FailureKind.PROVISIONING_FAILED, f"internal: {exc!r}")


class Kill(threading.Event):
    """An attempt's stop signal, and why it was given: a kill for a timeout must end the
    attempt as timed out, not as cancelled, whatever the backend saw."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: FailureKind | None = None
        self.note = ""  # set: the attempt ends as `reason` with this message, whatever it did

    def stop(self, reason: FailureKind, note: str = "") -> None:
        if self.reason is None:
            self.reason, self.note = reason, note
        self.set()


@dataclass(frozen=True)
class Ran:
    """An attempt as it ended, and the backend's reason why nothing else can run, if any."""

    attempt: Attempt
    stop_reason: str = ""  # the backend says nothing can run now (key refused, no balance)


@dataclass
class AttemptRunner:
    backend: Backend
    out_dir: Path  # logs/<job>.log and artifacts/<job>/ go here
    clock: Clock
    console: AttemptConsole
    extra_env: Mapping[str, str] = field(default_factory=dict)
    workspace_root: Path | None = None  # None: jobs start in an empty folder
    workspace_files: tuple[str, ...] = ()
    _artifacts: Path = field(init=False, repr=False)  # OUT/artifacts, joined once for all jobs

    def __post_init__(self) -> None:
        self._artifacts = self.out_dir / "artifacts"

    def run(
        self,
        job: Job,
        number: int,
        server: int,
        timeout_s: float,
        kill: threading.Event,
        placed: Callable[[Place], None] = _nothing,
    ) -> Ran:
        """Attempt `number` of `job` on the backend's server `server`. Never raises: whatever
        goes wrong (a log that cannot be opened included) ends the attempt with a failure
        kind, so a caller waiting for it never waits forever. `placed` is told the place once
        it is held: the script starts now."""
        began = self.clock.time()
        if isinstance(kill, Kill) and kill.is_set() and kill.note and kill.reason:
            # Stopped before it began (its start could not be recorded): nothing to place.
            return Ran(Attempt(number, began, self.clock.time(), None, kill.reason, kill.note))
        try:
            return self._run(job, number, server, timeout_s, kill, began, placed)
        except OSError as exc:  # the log could not be opened or written: ours
            local = _local_outcome(exc)
            return Ran(
                Attempt(number, began, self.clock.time(), None, local.failure, local.message)
            )
        except Exception as exc:
            failure = FailureKind.PROVISIONING_FAILED
            return Ran(
                Attempt(number, began, self.clock.time(), None, failure, f"internal: {exc!r}")
            )

    def _run(
        self,
        job: Job,
        number: int,
        server: int,
        timeout_s: float,
        kill: threading.Event,
        began: float,
        placed: Callable[[Place], None],
    ) -> Ran:
        place: Place | None = None
        placed_at: float | None = None
        owed: AttemptBill | None = None
        stop = ""
        log = JobLog(self.out_dir, job, number, self.console)
        try:
            place = self.backend.place(server, job, kill, log)
            placed_at = self.clock.time()
            self.console.placed(job, place)
            placed(place)
            log.header(place.name)
            for note in place.notes:
                log.note(note)
                self.console.notice(f"{job.id}: {note}")
            request = self._request(job, number, timeout_s)
            outcome = self.backend.run(place, request, log, kill, log)
        except JobCannotRun as exc:
            outcome = RunOutcome(None, FailureKind.UNAVAILABLE, str(exc))
        except RunMustStop as exc:
            outcome, stop = RunOutcome(None, FailureKind.UNAVAILABLE, str(exc)), str(exc)
        except CloreRunError as exc:
            kind = FailureKind.PROVISIONING_FAILED if place is None else FailureKind.SSH_FAILED
            outcome = RunOutcome(None, kind, str(exc))
        except OSError as exc:
            outcome = _local_outcome(exc)
        except Exception as exc:  # a backend bug must not hang the run
            outcome = RunOutcome(None, FailureKind.PROVISIONING_FAILED, f"internal: {exc!r}")
        finally:
            if place is not None:
                owed = self._done(place, log)
        outcome = _as_killed(outcome, kill, timeout_s)
        log.close(outcome)
        return Ran(self._attempt(number, began, place, placed_at, outcome, owed), stop)

    def _attempt(
        self,
        number: int,
        began: float,
        place: Place | None,
        placed_at: float | None,
        outcome: RunOutcome,
        owed: AttemptBill | None,
    ) -> Attempt:
        ended = self.clock.time()
        facts = {**(place.facts if place else {}), **outcome.facts}
        facts.pop("workdir", None)
        # A renting backend knows what the attempt cost (its share of the rental); otherwise
        # it is the place's hourly price over the attempt.
        hourly = place.usd_per_hour if place else 0.0
        cost = owed.usd if owed is not None else hourly * max(0.0, ended - began) / 3600
        server = place.name if place else ""
        # A timeout's process ends by our signal (-15): that number is ours, not the job's, and
        # read as an exit code it says "killed by SIGTERM" where every report says "timed out".
        code = None if outcome.failure is FailureKind.TIMEOUT else outcome.exit_code
        return Attempt(
            number, began, ended, code, outcome.failure, outcome.message, server,
            cost, facts, placed_at,
        )  # fmt: skip

    def _done(self, place: Place, log: JobLog) -> AttemptBill | None:
        try:
            return self.backend.attempt_done(place)
        except Exception as exc:  # shutdown() tries again; the run goes on
            log.note(f"releasing {place.name} failed: {exc}")
            return None

    def _request(self, job: Job, number: int, timeout_s: float) -> RunRequest:
        env = {
            **job.env,
            **self.extra_env,
            "CLORE_RUN_JOB": job.id,
            "CLORE_RUN_ATTEMPT": str(number),
        }
        with_workspace = job.workspace and self.workspace_root is not None
        return RunRequest(
            job=job,
            attempt=number,
            env=env,
            workspace_root=self.workspace_root if with_workspace else None,
            workspace_files=self.workspace_files if with_workspace else (),
            artifacts_dir=self._artifacts / job.id,
            timeout_s=timeout_s,
        )
