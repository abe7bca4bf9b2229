"""What the live view knows about a run: one row per job, fed by events with the time passed in.

No clock reads and no drawing here: the console feeds it and the renderers read it, so a test
can put it at any moment of a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from runner.backends.base import BackendStage
from runner.core.model import INFRASTRUCTURE_KINDS, Attempt, FailureKind, Job, JobResult

# Stages a row can be in, besides the ones a backend reports (BackendStage).
WAITING_NEEDS = "waiting for needs"
QUEUED = "queued"  # its needs are done; no place is free yet
NOT_BEFORE = "waiting until"
RETRY_WAIT = "retrying at"
STARTING = "starting"
DONE = "done"

# Stages in which the attempt holds (or is getting) a place.
ACTIVE: frozenset[str] = frozenset(
    {STARTING, "renting", "booting", "connecting", "uploading", "running", "fetching"}
)


@dataclass(eq=False)  # a row is one job's, found by its id: never compared
class Row:
    """What the board shows of one job: its stage, since when, and how its attempts went."""

    job: Job
    stage: str = WAITING_NEEDS
    detail: str = ""
    stage_since: float | None = None
    attempt: int = 0
    # The first attempt's start: the job's elapsed counts from here.
    first_began: float | None = None
    ended: float | None = None  # when it settled
    settled_usd: float = 0.0  # ended attempts
    usd_per_hour: float | None = None  # the running attempt's rate, once it is known
    billing_since: float | None = None
    until: float | None = None  # not-before / retry time
    status: str = ""  # "passed", "failed (allowed)"... once settled
    progress: str = ""  # the latest state of a line still being redrawn (`\r`)
    last_failure: Attempt | None = None
    failures: dict[str, int] = field(default_factory=dict)  # "retries" / "infra" -> count
    heartbeat_at: float | None = None  # plain mode: the last line saying it is alive

    def cost_usd(self, now: float) -> float:
        running = 0.0
        if self.usd_per_hour is not None and self.billing_since is not None:
            running = self.usd_per_hour * max(0.0, now - self.billing_since) / 3600
        return self.settled_usd + running

    def elapsed_s(self, now: float) -> float:
        if self.first_began is None:
            return 0.0
        return max(0.0, (self.ended if self.ended is not None else now) - self.first_began)


class Board:
    """The rows of a run, in pipeline order, and the totals of the header."""

    def __init__(
        self, jobs: Sequence[Job] = (), budget_usd: float | None = None, name: str = ""
    ) -> None:
        self.name = name
        self.budget_usd = budget_usd
        self.rows: dict[str, Row] = {job.id: Row(job) for job in jobs}
        self.extra_usd = 0.0  # cost no job carries (idle servers)

    def row(self, job: Job) -> Row:
        row = self.rows.get(job.id)
        if row is None:  # a job added while running (serve), or a console without a plan
            row = self.rows[job.id] = Row(job)
        return row

    # -- events ----------------------------------------------------------------------------

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        row = self.row(job)
        row.attempt, row.until, row.progress = number, None, ""
        if row.first_began is None:
            row.first_began = now
        self._enter(row, STARTING, "", now)

    def stage(
        self,
        job: Job,
        stage: BackendStage,
        detail: str,
        now: float,
        usd_per_hour: float | None = None,
    ) -> None:
        row = self.row(job)
        if row.stage == DONE:
            return  # a late report from a worker the run already settled
        if usd_per_hour is not None and row.billing_since is None:
            row.usd_per_hour, row.billing_since = usd_per_hour, now
        if stage == "running" and not detail and row.stage in ("renting", "connecting"):
            detail = row.detail  # keep saying where it runs
        self._enter(row, stage, detail, now)

    def placed(self, job: Job, where: str, usd_per_hour: float, now: float) -> None:
        row = self.row(job)
        if usd_per_hour and row.billing_since is None:
            row.usd_per_hour, row.billing_since = usd_per_hour, now
        if row.stage in (STARTING, "connecting"):
            self._enter(row, "running", "" if where == "localhost" else where, now)

    def attempt_ended(self, job: Job, attempt: Attempt, now: float) -> None:
        row = self.row(job)
        row.settled_usd += attempt.cost_usd
        row.usd_per_hour = row.billing_since = None
        row.progress = ""
        if attempt.failure is not None:
            row.last_failure = attempt
            key = "infra" if attempt.failure in INFRASTRUCTURE_KINDS else "retries"
            row.failures[key] = row.failures.get(key, 0) + 1

    def waiting(self, job: Job, until: float, retry: bool, now: float) -> None:
        row = self.row(job)
        row.until = until
        self._enter(row, RETRY_WAIT if retry else NOT_BEFORE, "", now)

    def settled(self, result: JobResult, status: str, now: float) -> None:
        row = self.rows.get(result.job_id)
        if row is None:
            return
        row.status, row.ended, row.progress = status, now, ""
        row.settled_usd = max(row.settled_usd, result.cost_usd)
        row.usd_per_hour = row.billing_since = None
        if row.first_began is None:
            row.first_began = row.ended = None
        self._enter(row, DONE, "", now)

    def set_progress(self, job: Job, text: str) -> None:
        self.row(job).progress = text

    def _enter(self, row: Row, stage: str, detail: str, now: float) -> None:
        row.stage, row.detail, row.stage_since = stage, detail, now
        row.heartbeat_at = now

    # -- reading ---------------------------------------------------------------------------

    def queue_waiting_rows(self) -> None:
        """Rows whose needs are all done and still wait: they wait for a place now."""
        for row in self.rows.values():
            if row.stage == WAITING_NEEDS and all(
                self.rows[n].stage == DONE for n in row.job.needs if n in self.rows
            ):
                row.stage = QUEUED

    def done(self) -> int:
        return sum(1 for r in self.rows.values() if r.stage == DONE)

    def active(self) -> list[Row]:
        return [r for r in self.rows.values() if r.stage in ACTIVE]

    def spent_usd(self, now: float) -> float:
        return sum(r.cost_usd(now) for r in self.rows.values()) + self.extra_usd

    def ordered(self) -> list[Row]:
        """Rows worth a look first: working, then about to work, then waiting, then done."""
        rank = {
            **dict.fromkeys(ACTIVE, 0),
            RETRY_WAIT: 1,
            QUEUED: 2,
            NOT_BEFORE: 3,
            WAITING_NEEDS: 4,
            DONE: 5,
        }
        rows = list(self.rows.values())
        return sorted(rows, key=lambda r: (rank.get(r.stage, 0), _done_order(r)))


def _done_order(row: Row) -> float:
    """Among finished jobs the latest first; others keep pipeline order (sort is stable)."""
    return -(row.ended or 0.0) if row.stage == DONE else 0.0


def counts_by_stage(rows: Iterable[Row]) -> dict[str, int]:
    tally: dict[str, int] = {}
    for row in rows:
        key = "running" if row.stage in ACTIVE else row.stage
        tally[key] = tally.get(key, 0) + 1
    return tally


def failure_key(kind: FailureKind) -> str:
    return "infra" if kind in INFRASTRUCTURE_KINDS else "retries"
