"""What a person watching the run sees: job events and live output.

On a terminal a status line (running, done, elapsed) stays at the bottom; elsewhere (CI logs)
every line is plain and prefixed with its job id. Console output per job is capped; the log
file always has everything.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from runner import redact
from runner.backends.base import Stream
from runner.core.model import Job, JobResult, JobStatus
from runner.report.github_actions import print_log_group
from runner.untrusted import console_line

CONSOLE_CAP_BYTES = 1 << 20  # per job; the rest is in logs/<job>.log
_MARK = {
    JobStatus.PASSED: "passed",
    JobStatus.FAILED: "FAILED",
    JobStatus.TIMED_OUT: "TIMED OUT",
    JobStatus.ERROR: "ERROR",
    JobStatus.SKIPPED: "skipped",
    JobStatus.CANCELLED: "cancelled",
}


def _remote(line: bytes) -> str:
    """A line of job output (from a server we do not control) as one harmless console line."""
    return console_line(line.decode("utf-8", "replace").rstrip())


class Console:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        total_jobs: int = 0,
        live: bool | None = None,
        grouped_logs: Path | None = None,
    ) -> None:
        """`grouped_logs`: in GitHub Actions, the logs folder; each job's log is then printed
        in a collapsible group when the job ends, instead of line by line."""
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.grouped_logs = grouped_logs
        self.total = total_jobs
        self._lock = threading.Lock()
        self._partial: dict[tuple[str, Stream], bytes] = {}
        self._printed: dict[str, int] = {}
        self._running: dict[str, float] = {}
        self._done = 0
        self._broken = False
        self._t0 = time.monotonic()

    # -- events ----------------------------------------------------------------------------

    def job_started(self, job: Job, attempt: int) -> None:
        again = f" (attempt {attempt})" if attempt > 1 else ""
        with self._lock:
            self._running[job.id] = time.monotonic()
            self._print(f"[{job.id}] started{again}")

    def job_done(self, job: Job, result: JobResult) -> None:
        took = f" in {result.duration_s:.1f}s" if result.attempts else ""
        why = (
            f": {console_line(result.reason)}"
            if result.reason and result.status is not JobStatus.PASSED
            else ""
        )
        with self._lock:
            self._running.pop(job.id, None)
            self._done += 1
            log = self.grouped_logs / f"{job.id}.log" if self.grouped_logs else None
            if log is not None and log.exists() and not self._broken:
                try:
                    print_log_group(f"{job.name}: {_MARK[result.status]}", log, self.stream)
                except (OSError, ValueError):
                    self._broken = True
            self._print(f"[{job.id}] {_MARK[result.status]}{took}{why}")

    def notice(self, text: str) -> None:
        with self._lock:
            self._print(f"clore-run: {console_line(text)}")

    # -- output ----------------------------------------------------------------------------

    def output(self, job: Job, stream: Stream, data: bytes) -> None:
        if self.grouped_logs is not None:
            return  # printed whole, in a group, when the job ends
        with self._lock:
            shown = self._printed.get(job.id, 0)
            if shown >= CONSOLE_CAP_BYTES:
                return
            self._printed[job.id] = shown + len(data)
            if shown + len(data) >= CONSOLE_CAP_BYTES:
                data += f"\n... more output in logs/{job.id}.log\n".encode()
            buffered = self._partial.pop((job.id, stream), b"") + data
            *lines, rest = buffered.split(b"\n")
            if rest:
                self._partial[(job.id, stream)] = rest
            for line in lines:
                self._print(f"[{job.id}] {_remote(line)}")

    def flush_job(self, job: Job) -> None:
        with self._lock:
            for stream in ("stdout", "stderr"):
                rest = self._partial.pop((job.id, stream), b"")
                if rest:
                    self._print(f"[{job.id}] {_remote(rest)}")

    # -- drawing (called with the lock held) -----------------------------------------------

    def _print(self, text: str) -> None:
        if self._broken:
            return
        text = redact.text(text)
        try:
            if self.live:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            if self.live:
                self.stream.write(self._status_line())
            self.stream.flush()
        except (OSError, ValueError):
            # A closed terminal or pipe (`| head`) must not fail the jobs: the logs and reports
            # still get everything.
            self._broken = True

    def _status_line(self) -> str:
        elapsed = time.monotonic() - self._t0
        running = ", ".join(sorted(self._running)) or "-"
        if len(running) > 60:
            running = running[:57] + "..."
        waiting = max(0, self.total - self._done - len(self._running))
        return (
            f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] running: {running} | "
            f"waiting: {waiting} | done: {self._done}/{self.total}"
        )

    def close(self) -> None:
        with self._lock:
            if self.live and not self._broken:
                try:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                except (OSError, ValueError):
                    self._broken = True  # the reports are written next: this must not stop them
