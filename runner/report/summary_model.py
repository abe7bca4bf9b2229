"""summary.json as types: what a run writes (schema 1), and what `--baseline` and `clore-run
comment` read back. schemas/summary.schema.json is generated from these classes
(runner.report.summary_schema).

Built strict, read lenient. `build_summary` passes every field (a test holds it to that) and an
unknown one is an error (`extra="forbid"`); `parse_summary` reads a file another version may
have written: fields it does not know are ignored, and one it lacks takes the default below,
which is what the readers took for an absent field before there was a model (null for an
unknown fact, 0 for a count). Ranges, formats and the status words are the schema's, for the
readers of the file; they are not checked on reading, so a hand-edited or foreign baseline still
compares (compare turns a number that is not finite into 0).
"""

# No `from __future__ import annotations`: pydantic would evaluate each of the 100-odd field
# annotations from its string, which took as long again as building the models (~20 ms at the
# end of every run).
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, with_config
from typing_extensions import TypedDict

from runner.core.model import FailureKind, JobStatus, RunStatus
from runner.outcome import exit_codes_help

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

SCHEMA_VERSION: Final = 1


class Says:
    """What the JSON Schema says of a value beyond its type (`minimum`, `format`, `enum`...):
    for the file's readers, not checked when a file is read back."""

    def __init__(self, **words: Any) -> None:
        self.words = words

    def __get_pydantic_json_schema__(
        self, core: "CoreSchema", handler: "GetJsonSchemaHandler"
    ) -> "JsonSchemaValue":
        return {**handler(core), **self.words}


Count = Annotated[int, Says(minimum=0)]
Seconds = Annotated[float, Says(minimum=0)]
Usd = Annotated[float, Says(minimum=0)]
Time = Annotated[str, Says(format="date-time", description="ISO 8601, UTC")]
# A fact that is null when unknown, never "".
Known = Annotated[str, Says(minLength=1)]
RunStatusWord = Annotated[str, Says(enum=[s.value for s in RunStatus])]
JobStatusWord = Annotated[str, Says(enum=[s.value for s in JobStatus])]
FailureWord = Annotated[str, Says(enum=[f.value for f in FailureKind])]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tool(_Model):
    name: Literal["clore-run"] = "clore-run"
    version: str = ""


class PipelineRef(_Model):
    name: str = ""
    source: str = Field("", description="the pipeline file as given")


class Hedges(_Model):
    boots_given_back: Count = 0
    cost_usd: Usd = 0.0


class RunTests(_Model):
    total: Count = 0
    passed: Count = 0
    failures: Count = 0
    errors: Count = 0
    skipped: Count = 0
    flaky_jobs: Count = 0


class Ci(_Model):
    server_url: str = ""
    repository: str = ""
    run_id: str = ""
    # Facts the environment does not give are null, as for every unknown fact.
    run_attempt: str | None = None
    run_url: str = ""
    ref_name: str | None = None
    sha: str | None = None
    event_name: str | None = None


class Delta(_Model):
    cost_usd: float = 0.0
    baseline_cost_usd: float = 0.0
    cost_delta_usd: float = 0.0
    cost_delta_pct: float | None = Field(
        None, description="null: nothing to compare with (a baseline of 0)"
    )
    duration_s: float = 0.0
    baseline_duration_s: float = 0.0
    duration_delta_s: float = 0.0
    duration_delta_pct: float | None = None


class _JobId(_Model):
    id: str


class JobDelta(Delta, _JobId):  # _JobId last: pydantic orders fields base first, so `id` leads
    pass


class Comparison(_Model):
    label: str = "baseline"
    baseline_run_url: str | None = None
    total: Delta = Delta()
    jobs: list[JobDelta] = Field(default_factory=list)
    new_jobs: list[str] = Field(default_factory=list)
    missing_jobs: list[str] = Field(default_factory=list)


@with_config(ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1}))
class Host(TypedDict, total=False):
    # Those of runner.report.facts.HOST_KEYS that are known; an unknown one is not there.
    gpu: str
    gpu_count: str
    driver: str
    cuda: str
    host_fingerprint: str
    server_id: str


class Location(_Model):
    file: str = ""
    line: Annotated[int, Says(minimum=1)] = 1
    column: Annotated[int, Says(minimum=1)] = 1


class JobTests(_Model):
    total: Count = 0
    failures: Count = 0
    errors: Count = 0
    skipped: Count = 0


class FailedTest(_Model):
    classname: str = ""
    name: str = ""
    message: str = ""
    kind: Literal["failure", "error"] = "failure"
    scope: Literal["test", "job"] = "test"


class Attempt(_Model):
    number: Annotated[int, Says(minimum=1)] = 1
    started_at: Time = ""
    finished_at: Time = ""
    duration_s: Seconds = 0.0
    exit_code: int | None = None
    failure: FailureWord | None = Field(None, description="null: it passed")
    message: str = ""
    server: Known | None = Field(None, description="where it ran; null when it never got a place")
    cost_usd: Usd = 0.0
    usd_per_hour: float | None = None
    facts: dict[str, str] = Field(
        default_factory=dict,
        description="what the backend learnt: GPU, driver, prices, order ids...",
    )
    # Always written; None only when a file from before it lacks it (the timeline then places
    # the attempt by its started_at).
    offset_s: Annotated[
        float | None,
        WithJsonSchema({"type": "number", "description": "its start, seconds after the run's"}),
    ] = None
    setup_s: Annotated[float, Says(minimum=0)] | None = Field(
        # Absent in a file from before it: the attempt ran at once.
        0.0,
        description="seconds getting a place before the script could start; null when it "
        "never got one",
    )


# Added to a job after schema 1 was published: a file from before has none, so the schema does
# not require them (their model default stands in when such a file is read).
JOB_ADDED_AFTER_PUBLISHING = ("warm_server", "server_wait_s")


def _job_published(schema: dict[str, Any]) -> None:
    schema["required"] = [f for f in schema["required"] if f not in JOB_ADDED_AFTER_PUBLISHING]


class Job(_Model):
    model_config = ConfigDict(json_schema_extra=_job_published)

    id: str
    name: str = ""
    group: Known | None = Field(
        None, description="the pipeline's job key (matrix instances share it)"
    )
    status: JobStatusWord = ""
    allowed_failure: bool = Field(
        False, description="failed, timed out or errored, and continue-on-error allows it"
    )
    reason: str = ""
    attempts: Count = 0
    duration_s: Seconds = 0.0
    exit_code: int | None = Field(None, description="of the last attempt")
    cost_usd: Usd = 0.0
    server: Known | None = Field(None, description="of the last attempt; null when it never ran")
    usd_per_hour: float | None = None
    gpu: Known | None = Field(None, description='"RTX 4090 x2"; null when not known')
    host: Host | None = Field(
        None, description="facts of the last attempt's host, those known; null when none is"
    )
    location: Location | None = None
    tests: JobTests = JobTests()
    flaky: bool = Field(False, description="passed, but only after a retry")
    failed_tests: list[FailedTest] = Field(default_factory=list)
    log_tail: list[str] = Field(
        default_factory=list,
        description="last lines of logs/<id>.log, for jobs that did not pass",
    )
    attempt_details: list[Attempt] = Field(default_factory=list)
    warm_server: bool = Field(
        False,
        description="its last attempt ran on a server `serve` kept warm after another job of "
        "its trust domain (no rental, no boot)",
    )
    server_wait_s: Seconds = Field(
        0.0,
        description="seconds its attempts waited for a server (renting, booting; about 0 on a "
        "warm one)",
    )


# Added to schema 1 after the schema was published: a file from before has none, so the schema
# does not require them (their model default stands in when such a file is read).
ADDED_AFTER_PUBLISHING = ("hedges", "exit_code")


def _published(schema: dict[str, Any]) -> None:
    schema["required"] = [f for f in schema["required"] if f not in ADDED_AFTER_PUBLISHING]


class Summary(_Model):
    """The run in numbers. Schema 1: fields are only ever added within a version (this file
    with them); unknown facts are null; times ISO 8601 UTC, durations seconds, money USD."""

    model_config = ConfigDict(
        title="clore-run summary.json",
        json_schema_extra=_published,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    schema_version: Literal[1] = Field(1, alias="schema", description="the version of this format")
    tool: Tool = Tool()
    pipeline: PipelineRef = PipelineRef()
    backend: str = ""
    run_id: str = ""
    status: RunStatusWord = ""
    exit_code: int | None = Field(
        None,
        description="what clore-run exited with, its reason in runner.outcome's words: "
        + exit_codes_help(),
    )
    started_at: Time = ""
    finished_at: Time = ""
    duration_s: Seconds = 0.0
    total_cost_usd: Usd = Field(0.0, description="jobs plus servers held idle between jobs")
    hedges: Hedges = Field(
        default=Hedges(),
        description="boots given back because the other boot of their job (a hedge, or the "
        "boot it hedged) answered SSH first, and what they cost (in total_cost_usd already)",
    )
    budget_usd: float | None = None
    budget_used_pct: float | None = None
    jobs_by_status: Annotated[
        dict[str, Count], Says(propertyNames={"enum": [s.value for s in JobStatus]})
    ] = Field(default_factory=dict)
    tests: RunTests = RunTests()
    ci: Ci | None = Field(None, description="where the run happened, in GitHub Actions")
    warnings: list[str] = Field(default_factory=list)
    comparison: Comparison | None = Field(None, description="cost and duration against --baseline")
    jobs: list[Job] = Field(default_factory=list, description="in pipeline order")

    def to_json(self) -> dict[str, Any]:
        """The JSON object summary.json holds (its fields in the order written)."""
        return self.model_dump()


def parse_summary(data: object) -> Summary:
    """A summary as read from a file: fields this version does not know are ignored, those it
    lacks take their defaults. Raises ValueError, in words, when it is not a summary."""
    if not isinstance(data, Mapping):
        raise ValueError("not a JSON object")
    try:
        return Summary.model_validate(data, extra="ignore")
    except ValidationError as exc:
        raise ValueError(_words(exc)) from None


def _words(exc: ValidationError) -> str:
    """The first problem, where it is (`jobs.2.cost_usd: ...`), and how many more."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the summary"
    what = "missing" if first["type"] == "missing" else str(first["msg"]).lower()
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {what}{more}"
