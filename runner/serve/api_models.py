"""The API's request and reply bodies (pydantic, at this edge only): they make the OpenAPI spec."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.spec import trust as trust_names
from runner.spec.diagnostics import did_you_mean
from runner.spec.models import GpuSpec, JobSpec, NameList, Strategy

_EXAMPLE = "2026-12-02T08:42:23.120+00:00"
Status = Literal[
    "queued", "running", "passed", "failed", "timed_out", "error", "skipped", "cancelled"
]


class JobSubmission(JobSpec):
    """One job, with the keys of a pipeline file's job (`run`, `timeout-minutes`, `gpu`...)."""

    # Built now, not deferred as the pipeline models are: FastAPI wraps a body model in a
    # TypeAdapter with field metadata, which pydantic cannot attach to a model not yet built.
    model_config = ConfigDict(**{**JobSpec.model_config, "defer_build": False})

    id: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$",
        max_length=100,
        description="Its key; the server id is s<submission>.<id> (default: job).",
    )
    needs: NameList | None = Field(
        None,
        description="Server ids of jobs that must finish first, e.g. s7.build "
        "(409 when the queue holds no such job).",
    )
    # No `defaults` here: a job submitted alone brings its own script.
    run: str = Field(description="The script, run by bash -eo pipefail.")
    trust: str | None = Field(
        None,
        pattern=trust_names.PATTERN,
        max_length=trust_names.MAX_LENGTH,
        description="Its trust domain: a server is reused only within one "
        f"(default: {trust_names.DEFAULT_TRUST}).",
    )


_NESTED: dict[str, type[BaseModel]] = {"gpu": GpuSpec, "strategy": Strategy}


def unknown_key_hint(loc: Sequence[str | int]) -> str:
    """For an unknown key in POST /jobs' body at `loc` (["body", "gpu", "cout"]): the nearest
    known key of that level, as `validate` suggests in a file."""
    if len(loc) < 2 or loc[0] != "body":
        return ""
    model: type[BaseModel] = JobSubmission
    for part in loc[1:-1]:
        if not isinstance(part, str) or part not in _NESTED:
            return ""
        model = _NESTED[part]
    keys = [field.alias or name for name, field in model.model_fields.items()]
    return did_you_mean(str(loc[-1]), keys)


class Problem(BaseModel):
    loc: list[str | int] = Field(description="Where: body/query, then the key path.")
    msg: str
    hint: str = ""
    line: int | None = None
    column: int | None = None


class ErrorReply(BaseModel):
    detail: str | list[Problem] | list[dict[str, Any]]


class Submitted(BaseModel):
    ids: list[str] = Field(description="The server ids of the jobs queued, in file order.")
    warnings: list[str] = Field(default_factory=list)


# Times as summary.json writes them: ISO 8601 in UTC (here to the millisecond, for latencies).
Time = Annotated[
    str, Field(description="ISO 8601, UTC: 2026-12-02T08:42:23.120+00:00", examples=[_EXAMPLE])
]


class JobSummary(BaseModel):
    id: str
    name: str
    status: Status
    allowed_failure: bool = Field(
        False,
        description="It failed, timed out or errored and `continue-on-error` lets that pass: "
        "shown as 'failed (allowed)'; it does not fail what needs it.",
    )
    priority: str
    submitted_at: Time
    started_at: Time | None = Field(description="When its first attempt started.")
    finished_at: Time | None
    reason: str
    attempts: int
    cost_usd: float
    waiting_for: str | None = Field(None, description="Why a queued job has not started yet.")
    trust: str = Field(
        trust_names.DEFAULT_TRUST, description="The trust domain of the job's submission."
    )


class AttemptView(BaseModel):
    number: int
    started_at: Time
    finished_at: Time | None
    exit_code: int | None
    failure: str | None
    message: str
    server: str
    cost_usd: float
    facts: dict[str, Any]
    instance: str = Field(
        default="", description="The serve instance that ran it (N servers on one queue)."
    )


class JobDetail(JobSummary):
    needs: list[str]
    server: str = Field(description="Where its last attempt ran.")
    attempt_list: list[AttemptView]
    spec: dict[str, Any]


class JobPage(BaseModel):
    jobs: list[JobSummary]
    next_after: int | None = Field(description="Pass as `after` for the next page; null: done.")


class Cancelled(BaseModel):
    id: str
    status: Literal["cancelled", "cancelling"]


class IdleRow(BaseModel):
    day: str = Field(description="The UTC day, YYYY-MM-DD.")
    gpu: str = Field(description="The GPU model of the idle servers.")
    usd: float = Field(description="What they cost while they ran no job.")
    seconds: float


class Stats(BaseModel):
    counts: dict[str, int]
    running: int
    capacity: int
    servers_held: int
    spend_usd_total: float
    spend_usd_today: float
    daily_spend_limit_usd: float | None
    held_until: Time | None = Field(description="The daily limit holds starts until then.")
    idle_usd_today: float = Field(
        0.0,
        description="What rented servers cost today while they ran no job (kept warm, or "
        "waiting for one): money of its own, in no job's cost.",
    )
    idle_budget_usd: float | None = Field(None, description="--idle-budget: USD a UTC day.")
    idle_by_day: list[IdleRow] = Field(
        default_factory=list, description="Idle money by UTC day and GPU type, oldest first."
    )


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    store: str | None = Field(None, description="Why the queue database refuses writes.")
