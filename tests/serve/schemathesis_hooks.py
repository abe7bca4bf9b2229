"""Schemathesis hooks for tests/serve/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

A generated body the API document allows must be accepted (positive_data_acceptance), except
where JSON Schema cannot say what the server refuses. Those parts are taken out of generated
bodies here, each for its reason, so the check holds for the rest:
- `needs` inside a pipeline must name jobs of the same file (a schema cannot refer to keys);
- a matrix's `exclude` may remove every combination;
- matrix values that differ but make the same job id ("A" and "a", 1 and "1"), and `include`
  entries that make a combination twice;
- a matrix's size (the product of its lists, at most 256), and the length of the ids it makes
  (a job's key and its matrix values, at most 100 characters together).
(Schemathesis applies these hooks to the fuzzing phase's bodies, not to its coverage phase's.)
"""

from __future__ import annotations

from typing import Any

import schemathesis

from runner.spec.matrix import instance_suffix


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    path = getattr(getattr(context, "operation", None), "path", "")
    if not isinstance(body, dict):
        return body
    if path == "/pipelines" and isinstance(body.get("jobs"), dict):
        jobs: dict[str, Any] = {}
        for key, job in body["jobs"].items():
            if isinstance(job, dict):
                job.pop("needs", None)
                _matrix(job)
            jobs.setdefault(str(key)[:_KEY], job)
        body["jobs"] = jobs
    elif path == "/jobs":
        if isinstance(body.get("id"), str):
            body["id"] = body["id"][:_KEY]
        _matrix(body)
    return body


_KEY = 20  # characters of a job's key kept: with 3 matrix values (a float takes 24), <= 100


def _matrix(job: dict[str, Any]) -> None:
    strategy = job.get("strategy")
    matrix = strategy.get("matrix") if isinstance(strategy, dict) else None
    if not isinstance(matrix, dict):
        return
    matrix.pop("exclude", None)
    matrix.pop("include", None)
    for key in list(matrix)[3:]:
        del matrix[key]
    for key, values in matrix.items():
        if isinstance(values, list):
            seen: dict[str, Any] = {}
            for value in values:
                value = value[:10] if isinstance(value, str) else value
                seen.setdefault(instance_suffix({key: value}), value)
            matrix[key] = list(seen.values())[:6]  # 6 ** 3 combinations at most
    if not matrix:
        job.pop("strategy")
