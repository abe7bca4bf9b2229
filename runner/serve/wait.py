"""`clore-run submit --wait`: follow a submission's jobs on a queue server until every one
settles, then write the reports `run` writes, drawn from the server's results.

The jobs are polled (GET /jobs/{id}) and each change of status is one line; with `--logs`, each
job's log is followed from its start (GET /jobs/{id}/log?follow=true, a thread per job) and its
lines are shown as `[job] line`, made inert: they come from a rented server.

A server that stops answering (a restart, a dropped connection) is waited for, up to LOST_S,
looking again less and less often; the wait says when it lost the server and when it answers
again. A followed log that is cut off is picked up again from the byte it had reached (the
server's `offset`), so no line is shown twice or lost; a line cut in the middle is completed.
Past LOST_S the wait ends with exit 3, saying where the jobs are (they go on there). A Ctrl-C (or
SIGTERM, SIGHUP) cancels the submission's jobs that have not settled, waits a few seconds for
the server to say they are, and writes the reports of an interrupted run (exit 130).

The reports name the jobs by their keys in the file (`build`, not `s7.build`), as `run`'s do, so
a workflow reads one submission's junit.xml as it read a run's.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

from runner import redact
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.events import StopCause
from runner.core.model import (
    Attempt,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    Pipeline,
    RunRecord,
)
from runner.core.outcome import run_status
from runner.errors import CloreRunError, InfrastructureError
from runner.report import ReportPaths, write_reports
from runner.serve.client import Client, ClientError
from runner.untrusted import console_line

FINAL = frozenset(s.value for s in JobStatus)
POLL_S = 1.0  # between two looks at the jobs' status: a second is what a person notices
CANCEL_WAIT_S = 5.0  # after a Ctrl-C: within the 7.5 s an Actions runner gives before SIGTERM
LOG_JOIN_S = 2.0  # for a followed log to finish after its job settled
# A server that stops answering is waited for this long: a restarted serve loses no job, and a
# CI job that gave up at the first refused connection would fail for a restart.
LOST_S = 120.0
AGAIN_FIRST_S = 0.2  # a lost server or log is looked for again after this, doubling...
AGAIN_MOST_S = 5.0  # ...up to this


@dataclass(frozen=True)
class Submission:
    """A pipeline queued on a server: its jobs by their keys in the file, and server ids."""

    number: int
    pipeline: Pipeline  # the file's jobs, with the ids `run` would give them
    server_ids: Mapping[str, str]  # the file's job id -> the server's (s7.build)
    started_at: float


def submission_of(pipeline: Pipeline, ids: Sequence[str], started_at: float) -> Submission:
    """The server's reply (its ids in file order, `s<n>.<id>`) matched to the file's jobs."""
    number_text = ids[0].split(".", 1)[0][1:] if ids else ""
    if not number_text.isdigit():
        raise InfrastructureError(f"the server named the jobs {list(ids)[:3]}: not s<n>.<job>")
    prefix = f"s{number_text}."
    by_local = {i[len(prefix) :]: i for i in ids if i.startswith(prefix)}
    missing = [j.id for j in pipeline.jobs if j.id not in by_local]
    if missing or len(by_local) != len(ids):
        raise InfrastructureError(
            f"the server queued other jobs than the file holds ({', '.join(missing[:3])})",
            "the server may run another clore-run version: compare `clore-run --version`",
        )
    return Submission(int(number_text), pipeline, by_local, started_at)


class Watch:
    """Follows one submission to its end. `run()` returns the jobs' last replies by file id."""

    def __init__(
        self,
        client: Client,
        submission: Submission,
        out: TextIO,
        *,
        logs: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        poll_s: float = POLL_S,
        lost_s: float = LOST_S,
    ) -> None:
        self.client = client
        self.submission = submission
        self.out = out
        self.logs = logs
        self.clock = clock
        self.poll_s = poll_s
        self.lost_s = lost_s
        self.interrupted = ""  # why the wait was cut short (a signal), "" while it is not
        self._wake = threading.Event()
        self._print_lock = threading.Lock()
        self._followers: dict[str, threading.Thread] = {}
        self._shown: dict[str, str] = {}
        self._lost_since: float | None = None
        self._lost_looks = 0  # looks since the server stopped answering
        self._over = threading.Event()  # the wait is over: followers stop looking again

    def interrupt(self, reason: str) -> None:
        """From a signal handler: cancel the submission's jobs, then stop waiting."""
        self.interrupted = self.interrupted or reason
        self._wake.set()

    def run(self) -> dict[str, dict[str, Any]]:
        try:
            return self._run()
        finally:
            self._over.set()

    def _run(self) -> dict[str, dict[str, Any]]:
        jobs: dict[str, dict[str, Any]] = {}
        deadline: float | None = None
        every = len(self.submission.server_ids)
        while True:
            self._look(jobs)
            if len(jobs) == every and all(j["status"] in FINAL for j in jobs.values()):
                break
            if self.interrupted and deadline is None:
                self._cancel(jobs)
                deadline = self.clock.now() + CANCEL_WAIT_S
            elif deadline is not None and self.clock.now() >= deadline:
                break
            self._wake.wait(self._pause())
            self._wake.clear()
        for follower in self._followers.values():
            follower.join(LOG_JOIN_S)
        return jobs

    def _look(self, jobs: dict[str, dict[str, Any]]) -> None:
        """The jobs not settled yet, as the server has them now; a server that does not answer
        is tried again until LOST_S have gone by."""
        try:
            for local, server_id in self.submission.server_ids.items():
                if jobs.get(local, {}).get("status") not in FINAL:
                    jobs[local] = self.client.job(server_id)
                    self._show(local, jobs[local])
        except InfrastructureError as exc:
            self._lost(exc)
            return
        if self._lost_since is not None:
            self._lost_since, self._lost_looks = None, 0
            self.say("the server answers again: following the jobs again")

    def _pause(self) -> float:
        """Until the next look: the poll, or while the server is lost a growing pause."""
        if self._lost_since is None:
            return self.poll_s
        self._lost_looks += 1
        return _again_s(self._lost_looks - 1, self.poll_s)

    def _lost(self, exc: InfrastructureError) -> None:
        now = self.clock.now()
        if self._lost_since is None:
            self._lost_since = now
            self.say(
                f"lost the server: {exc.message}: trying again for {self.lost_s:.0f} s "
                "(the jobs go on there)"
            )
        elif now - self._lost_since >= self.lost_s:
            raise InfrastructureError(
                f"{exc.message}, for {self.lost_s:.0f} s: stopped waiting",
                f"the jobs go on there: `clore-run status s{self.submission.number}.<job>` "
                "(a restarted serve keeps them)",
            )

    def _cancel(self, jobs: Mapping[str, dict[str, Any]]) -> None:
        self.say(f"{self.interrupted}: cancelling the submission's jobs")
        for local, job in jobs.items():
            if job["status"] in FINAL:
                continue
            try:
                self.client.cancel(self.submission.server_ids[local])
            except CloreRunError as exc:  # settled meanwhile (409), or the server went away
                self.say(f"{local}: not cancelled: {exc}")

    def _show(self, local: str, job: Mapping[str, Any]) -> None:
        words = _status_words(job)
        if self._shown.get(local) != words:
            self._shown[local] = words
            self.say(f"{local}: {words}")
        if self.logs and job["status"] != "queued" and local not in self._followers:
            follower = threading.Thread(
                target=self._follow, args=(local,), name=f"log {local}", daemon=True
            )
            self._followers[local] = follower
            follower.start()

    def _follow(self, local: str) -> None:
        log = _Log(local)
        server_id = self.submission.server_ids[local]
        cut_since: float | None = None
        looks = 0
        while True:
            try:
                self._stream(log, server_id, cut_since is not None)
                if self.client.job(server_id)["status"] in FINAL:
                    break  # a followed log ends when its job settles
                why = "the log ended before its job settled"
            except ClientError as exc:  # refused (no such job, another instance has it)
                self.say(f"[{local}] log not followed: {exc}")
                break
            except InfrastructureError as exc:
                why = exc.message
            now = self.clock.now()
            if cut_since is None:
                cut_since = now
                self.say(f"[{local}] log cut off ({why}): picking it up again")
            elif now - cut_since >= self.lost_s:
                self.say(f"[{local}] log not followed: {why}, for {self.lost_s:.0f} s")
                break
            if self._over.wait(_again_s(looks, self.poll_s)):
                break
            looks += 1
        if log.pending:  # the log is in logs/ at the end all the same
            self.say(f"[{local}] {_inert(log.pending)}")
        self._wake.set()  # look now, not a poll later

    def _stream(self, log: _Log, server_id: str, again: bool) -> None:
        """The log from the byte it had reached, shown line by line as it comes."""
        for chunk in self.client.log(server_id, follow=True, offset=log.offset):
            if again:
                again = False
                self.say(f"[{log.local}] log picked up again at byte {log.offset}")
            for line in log.add(chunk):
                self.say(f"[{log.local}] {_inert(line)}")
        if again:  # picked up again, with nothing more in it
            self.say(f"[{log.local}] log picked up again at byte {log.offset}")

    def say(self, line: str) -> None:
        with self._print_lock:
            print(line, file=self.out, flush=True)


class _Log:
    """A followed log: the bytes received (where it is picked up again) and the line begun."""

    def __init__(self, local: str) -> None:
        self.local = local
        self.offset = 0
        self.pending = b""

    def add(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes."""
        self.offset += len(chunk)
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return lines


def _again_s(looks: int, poll_s: float) -> float:
    """The pause before looking again for a lost server or log, after `looks` looks."""
    return min(AGAIN_MOST_S, max(poll_s, AGAIN_FIRST_S * (1 << min(looks, 8))))


def write_submission_reports(
    client: Client,
    submission: Submission,
    jobs: Mapping[str, Mapping[str, Any]],
    out_dir: Path,
    finished_at: float,
    interrupted: bool,
) -> tuple[RunRecord, ReportPaths]:
    """logs/<job>.log from the server, then `run`'s reports from the jobs' last replies."""
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for local, server_id in submission.server_ids.items():
        if local in jobs and jobs[local].get("attempts"):
            text = b"".join(client.log(server_id))
            (logs / f"{local}.log").write_bytes(redact.data(text))
    for job in submission.pipeline.jobs:
        if job.junit and jobs.get(job.id, {}).get("attempts"):
            _fetch_junit(
                client, submission.server_ids[job.id], job.junit, out_dir / "artifacts" / job.id
            )
    record = record_of(submission, jobs, finished_at, interrupted)
    return record, write_reports(out_dir, record)


def _fetch_junit(client: Client, server_id: str, name: str, folder: Path) -> None:
    """The job's own JUnit file where `run` keeps it (artifacts/<job>/), for junit.xml to merge
    as `run`'s does; a path that leaves the folder is left to the report's own warning."""
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        return
    body = client.artifact(server_id, name)
    if body is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def record_of(
    submission: Submission,
    jobs: Mapping[str, Mapping[str, Any]],
    finished_at: float,
    interrupted: bool,
) -> RunRecord:
    """The run record the reports are drawn from, as `run` would have kept it."""
    pipeline = submission.pipeline
    results = tuple(_result(job, jobs.get(job.id)) for job in pipeline.jobs)
    by_id = {job.id: job for job in pipeline.jobs}
    stop = StopCause.INTERRUPTED if interrupted else None
    return RunRecord(
        pipeline=pipeline,
        results=results,
        status=run_status(results, by_id, stop),
        started_at=submission.started_at,
        finished_at=finished_at,
        backend="serve",
        run_id=f"s{submission.number}",
    )


def _result(job: Job, reply: Mapping[str, Any] | None) -> JobResult:
    if reply is None or reply["status"] not in FINAL:
        why = "interrupted: the submission was cancelled before the server settled it"
        return JobResult(job.id, JobStatus.CANCELLED, why, _attempts(reply))
    status = JobStatus(reply["status"])
    origin = job.id if status in (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.ERROR) else ""
    return JobResult(job.id, status, str(reply.get("reason", "")), _attempts(reply), origin)


def _attempts(reply: Mapping[str, Any] | None) -> tuple[Attempt, ...]:
    if reply is None:
        return ()
    out = []
    for a in reply.get("attempt_list", []):
        started = _unix(a["started_at"]) or 0.0
        failure = a.get("failure")
        out.append(
            Attempt(
                number=int(a["number"]),
                started_at=started,
                finished_at=_unix(a.get("finished_at")) or started,
                exit_code=a.get("exit_code"),
                failure=FailureKind(failure) if failure else None,
                message=str(a.get("message", "")),
                server=str(a.get("server", "")),
                cost_usd=float(a.get("cost_usd", 0.0)),
                facts=MappingProxyType({str(k): str(v) for k, v in a.get("facts", {}).items()}),
            )
        )
    return tuple(out)


def _unix(text: str | None) -> float | None:
    return dt.datetime.fromisoformat(text).timestamp() if text else None


def _status_words(job: Mapping[str, Any]) -> str:
    """`running on <server>`, `queued (waits for ...)`, `passed`: made inert (the server's
    words may carry a rented server's text)."""
    status = str(job["status"])
    words = status.replace("_", " ")
    attempts = job.get("attempt_list") or []
    if status == "running" and attempts and attempts[-1].get("server"):
        words += f" on {attempts[-1]['server']}"
        if len(attempts) > 1:
            words += f" (attempt {len(attempts)})"
    elif status == "queued" and job.get("waiting_for"):
        words += f" (waits for {job['waiting_for']})"
    elif status in FINAL:
        words += f" (${float(job.get('cost_usd', 0.0)):.4f})"
        if job.get("reason") and status != "passed":
            words += f": {job['reason']}"
    return console_line(words)


def _inert(line: bytes) -> str:
    return console_line(line.rstrip(b"\r").decode("utf-8", "replace"))


__all__ = [
    "Submission",
    "Watch",
    "record_of",
    "submission_of",
    "write_submission_reports",
]
