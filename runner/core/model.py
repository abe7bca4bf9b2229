"""The plain, immutable data the scheduling core works on.

Everything here is stdlib only: the spec layer builds these from YAML, the core schedules them,
backends run them and reports render them. Times are seconds (floats); absolute times are unix
seconds passed in by the caller, never read from a clock here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal


class Priority(enum.IntEnum):
    """User priority of a job; a larger value runs first."""

    LOW = 0
    NORMAL = 1
    HIGH = 2
    URGENT = 3


class Condition(str, enum.Enum):
    """A job's `if:`: when it runs relative to the outcome of its needs."""

    SUCCESS = "success()"
    FAILURE = "failure()"
    ALWAYS = "always()"


class JobStatus(str, enum.Enum):
    """Final status of a job (the report vocabulary)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    ERROR = "error"  # infrastructure: the job could not run to a verdict
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class FailureKind(str, enum.Enum):
    """Why one attempt did not pass. Drives the retry table in `core.retry`."""

    TEST_FAILURE = "test_failure"  # the script exited non-zero (or was killed by a signal)
    TIMEOUT = "timeout"
    SERVER_LOST = "server_lost"  # spot outbid, server gone, connection dropped
    SSH_FAILED = "ssh_failed"
    PROVISIONING_FAILED = "provisioning_failed"
    UNAVAILABLE = "unavailable"  # no offer fits, or over budget: retrying cannot help
    CANCELLED = "cancelled"


# `workspace: all`: copy the folder even outside a git work tree (secrets still stay home).
WORKSPACE_ALL: Literal["all"] = "all"

INFRASTRUCTURE_KINDS = frozenset(
    {
        FailureKind.SERVER_LOST,
        FailureKind.SSH_FAILED,
        FailureKind.PROVISIONING_FAILED,
        FailureKind.UNAVAILABLE,
    }
)


@dataclass(frozen=True)
class GpuAsk:
    """What a job needs from a server. `max_usd_per_hour` is for the whole server."""

    type: str | None = None
    count: int = 1
    min_vram_gb: float = 0.0
    max_usd_per_hour: float | None = None
    spot: bool = False
    min_reliability: float | None = None


def gpu_json(gpu: GpuAsk | None) -> dict[str, object] | None:
    """A job's GPU ask as plan's JSON and serve's store write it: its fields by name."""
    return None if gpu is None else dataclasses.asdict(gpu)


@dataclass(frozen=True)
class Location:
    """Where a node sits in the pipeline file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SpecWarning:
    """Something in a valid pipeline file that likely does not mean what it says."""

    location: Location
    text: str  # "key.path: what (fix)"

    def __str__(self) -> str:
        return f"{self.location}: warning: {self.text}"


# One read-only empty mapping shared by every default: a proxy of a dict no one else holds
# cannot change, and an attempt (one per job run, thousands in a simulation) need not build
# a dict and a proxy of its own for facts it usually has none of.
_NO_ENTRIES: Mapping[str, str] = MappingProxyType({})


def _frozen_env() -> Mapping[str, str]:
    return _NO_ENTRIES


# The trust domain of a job whose submission named none (and of every job of a `run`).
DEFAULT_TRUST = "default"


@dataclass(frozen=True)
class Job:
    """One runnable job (a matrix instance is a job of its own)."""

    id: str  # unique, filesystem-safe
    name: str  # readable, e.g. "train (RTX 3090)"
    run: str  # the script body
    index: int = 0  # file order, the last tie-breaker
    needs: tuple[str, ...] = ()
    priority: Priority = Priority.NORMAL
    timeout_s: float = 3600.0
    retries: int = 0
    gpu: GpuAsk | None = None
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=_frozen_env)
    workspace: bool | Literal["all"] = True  # "all": copy a folder outside git too
    artifacts: tuple[str, ...] = ()
    junit: str | None = None
    condition: Condition = Condition.SUCCESS
    not_before: float | None = None  # unix seconds
    continue_on_error: bool = False
    group: str = ""  # the job key in the file (shared by matrix instances)
    matrix: Mapping[str, str] = field(default_factory=_frozen_env)
    fail_fast: bool = True
    estimate_s: float | None = None  # expected duration, for critical paths and plans
    boot_timeout_s: float | None = None  # a rented server's order -> online (None: default)
    location: Location | None = None
    # Keys of the job (or `defaults:`) that one backend reads and nothing else does, by name
    # as written (runner.backends.spec.PipelineKey): the core carries them untouched.
    backend_keys: Mapping[str, str] = field(default_factory=_frozen_env)
    # The trust domain of the submission (serve): a server that ran a job of one domain is
    # never given to a job of another. A run is one domain, the default one.
    trust: str = DEFAULT_TRUST

    @property
    def duration_hint_s(self) -> float:
        """What the scheduler assumes a job takes: its estimate, else its timeout."""
        return self.estimate_s if self.estimate_s is not None else self.timeout_s


class Provisioning(str, enum.Enum):
    """When a job's server is rented: the pipeline's `provision:` key."""

    AHEAD = "ahead"  # as soon as its needs are expected to end within a boot
    ON_DEMAND = "on-demand"  # only once the job is ready to run


@dataclass(frozen=True)
class Pipeline:
    """A validated, expanded pipeline: jobs in file order."""

    name: str
    jobs: tuple[Job, ...]
    concurrency: int = 3
    budget_usd: float | None = None
    timeout_s: float | None = None
    hosts: tuple[str, ...] = ()
    source: str = ""  # the pipeline file path
    provisioning: Provisioning = Provisioning.AHEAD
    warnings: tuple[SpecWarning, ...] = ()  # shown by validate, plan and run; never fatal
    # Top-level keys that one backend reads and nothing else does, by name as written
    # (runner.backends.spec.PipelineKey; a key the file leaves out is absent, its default the
    # backend's): the core carries them untouched.
    backend_keys: Mapping[str, str] = field(default_factory=_frozen_env)

    def job(self, job_id: str) -> Job:
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(job_id)


@dataclass(frozen=True)
class Attempt:
    """One try at running a job."""

    number: int  # 1-based
    started_at: float
    finished_at: float
    exit_code: int | None = None
    failure: FailureKind | None = None  # None: passed
    message: str = ""
    server: str = ""
    cost_usd: float = 0.0
    facts: Mapping[str, str] = field(default_factory=_frozen_env)  # GPU, fingerprint, price...
    placed_at: float | None = None  # the place was held and the script could start (after
    # renting and booting a server): the timeline draws the time before it apart

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)


@dataclass(frozen=True)
class JobResult:
    """The final word on a job."""

    job_id: str
    status: JobStatus
    reason: str = ""
    attempts: tuple[Attempt, ...] = ()
    # The failed job this one descends from (itself when it failed, else the first origin among
    # its needs'); "" when no job at or above it failed. It is what `failure()` further down
    # reacts to, and what makes `success()` false, as in GitHub Actions, where failure() is
    # true "if any ancestor job fails".
    failure_origin: str = ""

    @property
    def duration_s(self) -> float:
        return sum(a.duration_s for a in self.attempts)

    @property
    def cost_usd(self) -> float:
        return sum(a.cost_usd for a in self.attempts)

    @property
    def exit_code(self) -> int | None:
        return self.attempts[-1].exit_code if self.attempts else None

    @property
    def server(self) -> str:
        return self.attempts[-1].server if self.attempts else ""


class RunStatus(str, enum.Enum):
    """Outcome of a whole run; maps to the exit code."""

    PASSED = "passed"  # exit 0
    FAILED = "failed"  # exit 1: a job failed
    ERROR = "error"  # exit 3: infrastructure
    INTERRUPTED = "interrupted"  # exit 130


@dataclass(frozen=True)
class RunRecord:
    """Everything the reports need about a finished (or interrupted) run."""

    pipeline: Pipeline
    results: tuple[JobResult, ...]  # in pipeline job order
    status: RunStatus
    started_at: float  # unix seconds
    finished_at: float
    backend: str = "local"
    run_id: str = ""
    idle_cost_usd: float = 0.0  # rented servers held between jobs and given back unused

    @property
    def total_cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.results) + self.idle_cost_usd
