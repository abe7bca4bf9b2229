"""The queue's console: attempts run through `runner.engine.attempt.AttemptRunner`, as in `run`;
their logs go to `<data>/logs/<job>.log` (every attempt appended), and nobody watches a console."""

from __future__ import annotations

from runner.backends.base import BackendStage, Place, Stream
from runner.core.model import Job


class QuietConsole:
    """An AttemptConsole (runner.joblog) that shows nothing: a server has nobody watching, and
    must not keep per-job console state for months (nor a redraw thread)."""

    def placed(self, job: Job, place: Place) -> None:
        return None

    def stage(
        self, job: Job, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None:
        return None

    def note(self, job: Job, text: str) -> None:
        return None

    def notice(self, text: str) -> None:
        return None

    def output(self, job: Job, stream: Stream, data: bytes) -> None:
        return None

    def flush_job(self, job: Job) -> None:
        return None
