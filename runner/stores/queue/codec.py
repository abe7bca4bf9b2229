"""Jobs and attempts as JSON, for the queue's rows (both halves) and `serve`'s API replies.

Explicit field by field (not `dataclasses.asdict`): the stored form is a file format that must
outlive refactors of `Job`, and unknown or missing keys in an old row must not break a load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from runner.core.model import (
    DEFAULT_TRUST,
    Condition,
    FailureKind,
    GpuAsk,
    Job,
    Location,
    Priority,
    gpu_json,
)


def job_to_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "run": job.run,
        "needs": list(job.needs),
        "priority": job.priority.name.lower(),
        "timeout_s": job.timeout_s,
        "retries": job.retries,
        "gpu": gpu_json(job.gpu),
        "image": job.image,
        "env": dict(job.env),
        "workspace": job.workspace,
        "artifacts": list(job.artifacts),
        "junit": job.junit,
        "condition": job.condition.value,
        "not_before": job.not_before,
        "continue_on_error": job.continue_on_error,
        "group": job.group,
        "matrix": dict(job.matrix),
        "fail_fast": job.fail_fast,
        "estimate_s": job.estimate_s,
        "boot_timeout_s": job.boot_timeout_s,
        "location": _location_to_json(job.location),
        "trust": job.trust,
    }


def job_from_json(data: Mapping[str, Any]) -> Job:
    gpu = data.get("gpu")
    location = data.get("location")
    return Job(
        id=data["id"],
        name=data.get("name", data["id"]),
        run=data["run"],
        needs=tuple(data.get("needs", ())),
        priority=Priority[str(data.get("priority", "normal")).upper()],
        timeout_s=float(data.get("timeout_s", 3600.0)),
        retries=int(data.get("retries", 0)),
        gpu=GpuAsk(**gpu) if gpu else None,
        image=data.get("image"),
        env=MappingProxyType(dict(data.get("env", {}))),
        workspace=bool(data.get("workspace", True)),
        artifacts=tuple(data.get("artifacts", ())),
        junit=data.get("junit"),
        condition=Condition(data.get("condition", Condition.SUCCESS.value)),
        not_before=data.get("not_before"),
        continue_on_error=bool(data.get("continue_on_error", False)),
        group=data.get("group", ""),
        matrix=MappingProxyType(dict(data.get("matrix", {}))),
        fail_fast=bool(data.get("fail_fast", True)),
        estimate_s=data.get("estimate_s"),
        boot_timeout_s=data.get("boot_timeout_s"),
        location=Location(**location) if location else None,
        trust=str(data.get("trust", DEFAULT_TRUST)),
    )


def _location_to_json(location: Location | None) -> dict[str, Any] | None:
    if location is None:
        return None
    return {"file": location.file, "line": location.line, "column": location.column}


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def failure_from(text: str | None) -> FailureKind | None:
    return FailureKind(text) if text else None
