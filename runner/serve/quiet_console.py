"""The queue's console: attempts run through `runner.attempt.AttemptRunner`, as in `run`; their
logs go to `<data>/logs/<job>.log` (every attempt appended), and nobody watches a console."""

from __future__ import annotations

from runner.backends.base import Stream
from runner.console import Console
from runner.core.model import Job


class QuietConsole(Console):
    """JobLog also echoes output to a console; a server has nobody watching one, and must
    not keep per-job console state for months."""

    def output(self, job: Job, stream: Stream, data: bytes) -> None:
        return None

    def flush_job(self, job: Job) -> None:
        return None
