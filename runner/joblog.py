"""A job's log: every byte of every attempt in OUT/logs/<job>.log, and a live copy on the console.

The file gets the raw bytes (job output need not be UTF-8); the console gets decoded lines.
Both get them with every known secret taken out first: a job that prints its environment (or the
key it was handed through `env:`) must not put the key in `logs/`, which CI uploads.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Protocol

from runner import redact
from runner.backends.base import BackendStage, Place, RunOutcome, Stream
from runner.core.model import FailureKind, Job

_STREAMS: tuple[Stream, ...] = ("stdout", "stderr")
# An attempt's end in the log, in words: `attempt 1 failed: exit code 3`, not the enum's name.
VERDICTS = {
    FailureKind.TEST_FAILURE: "failed",
    FailureKind.TIMEOUT: "timed out",
    FailureKind.SERVER_LOST: "lost its server",
    FailureKind.SSH_FAILED: "could not reach its server over SSH",
    FailureKind.PROVISIONING_FAILED: "could not get its server ready",
    FailureKind.UNAVAILABLE: "found no server",
    FailureKind.CANCELLED: "was cancelled",
}


class AttemptConsole(Protocol):
    """What an attempt shows a person as it runs: `run`'s runner.engine.console.Console; a queue
    server, where nobody watches, shows nothing (runner.serve.quiet_console)."""

    def placed(self, job: Job, place: Place) -> None: ...

    def stage(
        self, job: Job, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None: ...

    def note(self, job: Job, text: str) -> None: ...

    def notice(self, text: str) -> None: ...

    def output(self, job: Job, stream: Stream, data: bytes) -> None: ...

    def flush_job(self, job: Job) -> None: ...


class JobLog:
    """The OutputSink and StageSink for one attempt of one job."""

    def __init__(self, out_dir: Path, job: Job, attempt: int, console: AttemptConsole) -> None:
        self.job = job
        self.attempt = attempt
        self.console = console
        # A bare descriptor: every write goes to the file at once (a run killed hard still
        # leaves the log complete up to there) without a buffer to flush after each, and
        # without the two system calls open() adds to see where the end is.
        logs = os.path.join(out_dir, "logs")
        self._path = os.path.join(logs, f"{job.id}.log")
        try:
            self._fd = _open_log(self._path)
        except FileNotFoundError:  # the run's first log: the folder is made once, not per job
            os.makedirs(logs, exist_ok=True)
            self._fd = _open_log(self._path)
        # Made at a stream's first output: most short jobs print nothing on one or both,
        # and a redactor made and flushed for nothing reads the environment twice.
        self._redacted: dict[Stream, redact.Stream] = {}
        # Whether what the file holds ends a line: a line of ours (a note, the verdict) after
        # output that did not (a progress bar's last `\r` redraw) starts on a line of its own.
        self._at_line_start = True
        self._last_stream: Stream | None = None

    def header(self, place: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._raw(f"=== {self.job.id}: attempt {self.attempt} on {place} at {stamp} ===\n")

    def write(self, stream: Stream, data: bytes) -> None:
        redacted = self._redacted.get(stream)
        if redacted is None:
            redacted = self._redacted[stream] = redact.Stream()
        self._emit(stream, redacted.feed(data))

    def _emit(self, stream: Stream, data: bytes) -> None:
        if not data:
            return
        # The other stream left its line unfinished (a progress bar's `\r` redraws): this
        # stream's bytes start a line of their own in the file instead of being spliced in.
        split = stream != self._last_stream and not self._at_line_start
        self._last_stream = stream
        _write_all(self._fd, self._path, b"\n" + data if split else data)
        self._at_line_start = data.endswith(b"\n")
        self.console.output(self.job, stream, data)

    def note(self, text: str) -> None:
        """A line of ours in the log, and on the console."""
        self._raw(f"clore-run: {text}\n")
        self.console.note(self.job, text)

    def stage(
        self, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None:
        self.console.stage(self.job, stage, detail, usd_per_hour)

    def close(self, outcome: RunOutcome) -> None:
        try:
            for stream in _STREAMS:  # in this order whichever spoke first, as always
                redacted = self._redacted.get(stream)
                if redacted is not None:
                    self._emit(stream, redacted.flush())
            self.console.flush_job(self.job)
            verdict = "passed" if outcome.failure is None else VERDICTS[outcome.failure]
            detail = f": {outcome.message}" if outcome.message else ""
            if outcome.failure is FailureKind.TIMEOUT and outcome.message.startswith("timed out"):
                verdict, detail = outcome.message, ""  # "timed out after 6 s", said once
            self._raw(f"=== {self.job.id}: attempt {self.attempt} {verdict}{detail} ===\n")
        finally:
            os.close(self._fd)  # even when the disk is full: no descriptor left behind

    def _raw(self, text: str) -> None:
        if not self._at_line_start:
            text = "\n" + text
        _write_all(self._fd, self._path, redact.text(text).encode("utf-8", "replace"))
        self._at_line_start = text.endswith("\n")


def _open_log(path: str) -> int:
    """Appended to (a retry's attempt follows the last one); JobLog.close closes it."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)


def _write_all(fd: int, path: str, data: bytes) -> None:
    """A write may take part of `data` (a signal, a nearly full disk): the rest goes in
    further writes, as a buffered file's flush would do."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if not written:  # never for a regular file; never loop on it either
            raise OSError(errno.EIO, f"cannot write to {path}")
        view = view[written:]
