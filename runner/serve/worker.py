"""One attempt of one job on a backend, as the engine runs it: acquire, run, release, log.

The engine's `_work` is a method of a per-pipeline Engine, so the queue has its own copy of the
same steps and the same mapping of backend errors to failure kinds; the log is the same JobLog
file (`<data>/logs/<job>.log`, every attempt appended).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.backends.base import Backend, Place, RunOutcome, RunRequest, Stream
from runner.console import Console
from runner.core.model import Attempt, FailureKind, Job
from runner.errors import CloreRunError, JobCannotRun, RunMustStop
from runner.joblog import JobLog


class QuietConsole(Console):
    """JobLog also echoes output to a console; a server has nobody watching one, and must
    not keep per-job console state for months."""

    def output(self, job: Job, stream: Stream, data: bytes) -> None:
        return None

    def flush_job(self, job: Job) -> None:
        return None


@dataclass(frozen=True)
class Ran:
    attempt: Attempt
    stop_reason: str = ""  # the backend says nothing can run now (key refused, no balance)


@dataclass
class Worker:
    """Runs attempts; `held` is told +1 when a place is acquired and -1 when it is released."""

    backend: Backend
    out_dir: Path
    extra_env: Mapping[str, str]
    clock: Callable[[], float]
    held: Callable[[int], None]
    console: Console

    def run(self, job: Job, number: int, timeout_s: float, kill: threading.Event) -> Ran:
        began = self.clock()
        place: Place | None = None
        stop = ""
        log = JobLog(self.out_dir, job, number, self.console)
        try:
            place = self.backend.acquire(job, kill)
            self.held(1)
            log.header(place.name)
            outcome = self.backend.run(place, self._request(job, number, timeout_s), log, kill)
        except JobCannotRun as exc:
            outcome = RunOutcome(None, FailureKind.UNAVAILABLE, str(exc))
        except RunMustStop as exc:
            outcome, stop = RunOutcome(None, FailureKind.UNAVAILABLE, str(exc)), str(exc)
        except CloreRunError as exc:
            kind = FailureKind.PROVISIONING_FAILED if place is None else FailureKind.SSH_FAILED
            outcome = RunOutcome(None, kind, str(exc))
        except Exception as exc:  # a backend bug must not kill the queue's worker
            outcome = RunOutcome(None, FailureKind.PROVISIONING_FAILED, f"internal: {exc!r}")
        finally:
            if place is not None:
                self._release(place, log)
        log.close(outcome)
        return Ran(self._attempt(number, began, place, outcome), stop)

    def _attempt(
        self, number: int, began: float, place: Place | None, outcome: RunOutcome
    ) -> Attempt:
        ended = self.clock()
        facts = {**(place.facts if place else {}), **outcome.facts}
        facts.pop("workdir", None)
        # A renting backend knows what the attempt cost; otherwise it is the hourly price.
        billed = facts.pop("cost_usd", None)
        hourly = place.usd_per_hour if place else 0.0
        cost = float(billed) if billed is not None else hourly * max(0.0, ended - began) / 3600
        server = place.name if place else ""
        return Attempt(
            number, began, ended, outcome.exit_code, outcome.failure, outcome.message, server,
            cost, facts,
        )  # fmt: skip

    def _release(self, place: Place, log: JobLog) -> None:
        try:
            self.backend.release(place)
        except Exception as exc:  # shutdown() tries again; the queue goes on
            log.note(f"releasing {place.name} failed: {exc}")
        finally:
            self.held(-1)

    def _request(self, job: Job, number: int, timeout_s: float) -> RunRequest:
        env = {
            **job.env,
            **self.extra_env,
            "CLORE_RUN_JOB": job.id,
            "CLORE_RUN_ATTEMPT": str(number),
        }
        # A queue server has no workspace of its own: jobs start in a fresh, empty folder.
        return RunRequest(
            job=job,
            attempt=number,
            env=env,
            workspace_root=None,
            workspace_files=(),
            artifacts_dir=self.out_dir / "artifacts" / job.id,
            timeout_s=timeout_s,
        )
