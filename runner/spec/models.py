"""Pydantic models of the pipeline file: strict, unknown keys are errors.

These exist only at the edge: the loader turns them into the core's plain `Pipeline`. Their field
descriptions feed `clore-run schema`, which editors use to complete and check pipeline files.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from runner.backends.registry import pipeline_keys
from runner.spec.coercions import iso_time, one_or_many, scalar_strings, whole_number
from runner.spec.limits import MAX_CONCURRENCY, MAX_MINUTES, MIN_MINUTES
from runner.spec.schema_rules import finite_numbers, job_rules, pipeline_rules, strategy_rules

PriorityName = Literal["low", "normal", "high", "urgent"]
ProvisionName = Literal["ahead", "on-demand"]


NameList = Annotated[
    list[str], BeforeValidator(one_or_many, json_schema_input_type=str | list[str])
]
EnvMap = Annotated[
    dict[str, str],
    BeforeValidator(scalar_strings, json_schema_input_type=dict[str, str | int | float | bool]),
]
WholeNumber = Annotated[int, BeforeValidator(whole_number)]
IsoTime = Annotated[datetime, BeforeValidator(iso_time, json_schema_input_type=str)]


class StrictModel(BaseModel):
    # defer_build: a validator is built when a model first validates, not when its class is
    # made; `validate` then builds the three the loader uses, not the schema-only ones.
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        populate_by_name=False,
        allow_inf_nan=False,
        defer_build=True,
        json_schema_extra=finite_numbers,
    )


def field_name(key: str) -> str:
    """The model's name of a file's key: `min-vram-gb` is `min_vram_gb`."""
    return key.replace("-", "_")


def _backend_keys(level: str) -> type[StrictModel]:
    """A base model holding the backends' own keys at `level` (runner.backends.registry),
    each one of its choices: the models below accept them as their own keys, with the same
    located errors as any other, and `clore-run schema` lists them."""
    fields: dict[str, Any] = {}
    for key in pipeline_keys(level):
        choice: Any = Literal.__getitem__(key.choices)  # the choices come from the registry
        kind = choice if key.default is not None else choice | None
        alias = key.name if field_name(key.name) != key.name else None
        fields[field_name(key.name)] = (
            kind,
            Field(key.default, alias=alias, description=key.description),
        )
    return create_model(f"BackendKeys_{level}", __base__=StrictModel, **fields)


# mypy sees the plain base: the keys are the registry's, known when this module runs, and are
# read by name (runner.spec.loader), never as attributes.
if TYPE_CHECKING:
    _JobKeys = StrictModel
    _PipelineKeys = StrictModel
else:
    _JobKeys = _backend_keys("job")
    _PipelineKeys = _backend_keys("pipeline")


class GpuSpec(StrictModel):
    """The server a job needs."""

    type: str | None = Field(
        None, description='GPU model, matched case-insensitively as a substring ("RTX", "4090").'
    )
    count: WholeNumber = Field(1, ge=1, le=16, description="Number of GPUs on the server.")
    min_vram_gb: float = Field(0, ge=0, alias="min-vram-gb", description="Minimum VRAM per GPU.")
    max_price: float | None = Field(
        None, gt=0, alias="max-price", description="Maximum USD per hour for the whole server."
    )
    spot: bool = Field(False, description="Rent as spot (cheaper, may be outbid).")
    min_reliability: float | None = Field(
        None, ge=0, le=1, alias="min-reliability", description="Minimum host reliability, 0..1."
    )


class Strategy(StrictModel):
    model_config = ConfigDict(json_schema_extra=strategy_rules)

    fail_fast: bool = Field(
        True, alias="fail-fast", description="Cancel the other matrix jobs when one fails."
    )
    matrix: dict[str, Any] = Field(
        description="Keys with lists of values; every combination becomes a job. "
        "`include`/`exclude` work as in GitHub Actions."
    )


class JobSettings(_JobKeys):
    """Keys a job and `defaults` share (the backends' own among them)."""

    model_config = ConfigDict(json_schema_extra=job_rules)

    image: str | None = Field(None, description="Docker image for rented servers.")
    timeout_minutes: float | None = Field(
        None,
        ge=MIN_MINUTES,
        le=MAX_MINUTES,
        alias="timeout-minutes",
        description="Per attempt; any positive number.",
    )
    boot_timeout_minutes: float | None = Field(
        None,
        ge=MIN_MINUTES,
        le=MAX_MINUTES,
        alias="boot-timeout-minutes",
        description="A rented server's longest wait from the order to online (default 6: a "
        "server that never comes up is given back before Clore charges its creation fee at 10); "
        "part of the budget's worst case.",
    )
    # bounds before the conversion: after it, pydantic writes them into the schema unchecked
    retries: Annotated[int, Field(ge=0, le=20), BeforeValidator(whole_number)] | None = Field(
        None, description="Extra attempts after a failure."
    )
    gpu: GpuSpec | None = None
    workspace: bool | Literal["all"] | None = Field(
        None,
        description="Copy the git-tracked files into the job's directory (default true); "
        "outside a git work tree only `all` copies the folder (secrets never travel).",
    )
    env: EnvMap | None = Field(None, description="Environment variables for the job.")
    priority: PriorityName | None = Field(None, description="low | normal | high | urgent.")
    continue_on_error: bool | None = Field(
        None, alias="continue-on-error", description="A failure does not fail the run."
    )
    artifacts: NameList | None = Field(None, description="Files or globs to fetch back.")
    junit: str | None = Field(None, description="A JUnit XML file the job writes.")
    if_: str | None = Field(
        None, alias="if", description="success() (default) | failure() | always()."
    )
    not_before: IsoTime | None = Field(
        None, alias="not-before", description="ISO-8601 time with zone; do not start earlier."
    )
    estimate_minutes: float | None = Field(
        None,
        ge=MIN_MINUTES,
        le=MAX_MINUTES,
        alias="estimate-minutes",
        description="Expected duration, for plans.",
    )
    run: str | None = Field(None, description="The script, run by bash -eo pipefail.")


class Defaults(JobSettings):
    """Values every job gets unless it sets its own."""


class JobSpec(JobSettings):
    name: str | None = Field(None, description="Display name (default: the job key).")
    needs: NameList | None = Field(None, description="Jobs that must finish first.")
    strategy: Strategy | None = None


class PipelineSettings(_PipelineKeys):
    name: str | None = Field(None, description="Pipeline name (default: the file name).")
    concurrency: WholeNumber = Field(
        3, ge=1, le=MAX_CONCURRENCY, description="Max servers held at once."
    )
    budget: float | None = Field(None, gt=0, description="USD, hard cap on the whole run.")
    timeout_minutes: float | None = Field(
        None, ge=MIN_MINUTES, le=MAX_MINUTES, alias="timeout-minutes"
    )
    provision: ProvisionName = Field(
        "ahead",
        description="When a job's server is rented: ahead (once its needs are expected to end "
        "within a server's boot, so the boot overlaps them) or on-demand (once it is ready).",
    )
    env: EnvMap = Field(default_factory=dict, description="Environment for every job.")
    hosts: NameList = Field(
        default_factory=list, description="SSH hosts (user@host[:port]) for --backend ssh."
    )


class PipelineHeader(PipelineSettings):
    """The top level as first validated; jobs and defaults are validated one by one later."""

    defaults: dict[str, Any] = Field(default_factory=dict)
    jobs: dict[str, Any]


class PipelineSchema(PipelineSettings):
    """The complete format, for the JSON Schema."""

    model_config = ConfigDict(title="clore-run pipeline", json_schema_extra=pipeline_rules)
    defaults: Defaults | None = None
    jobs: dict[str, JobSpec] = Field(description="The jobs, by id.")
