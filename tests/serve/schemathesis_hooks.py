"""Schemathesis hooks for tests/serve/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

A generated body the API document allows must be accepted (positive_data_acceptance), except
where JSON Schema cannot say what the server refuses. Those parts are taken out of generated
bodies here, each for its reason, so the check holds for the rest:
- `needs` inside a pipeline must name jobs of the same file (a schema cannot refer to keys);
- a matrix's `exclude` may remove every combination;
- matrix values that differ but make the same job id ("A" and "a", 1 and "1"), and `include`
  entries that make a combination twice;
- a matrix's size (the product of its lists, at most 256), and the length of the ids it makes
  (a job's key and its matrix values, at most 100 characters together): one key of at most 6
  values is kept, each making an id no other job of the file makes;
- which calendar dates exist (`not-before: 4112-11-31T18Z` has the documented form, but November
  has 30 days): a generated time is replaced by one that exists.
The hook maps whole cases, so it reaches every phase (coverage, fuzzing, stateful; a body hook
reaches the fuzzing phase only), and only positive ones: pruning a negative case's matrix could
take its violation out and turn "refused as it should be" into "accepted against the document".
"""

from __future__ import annotations

from typing import Any

import schemathesis

from runner.spec.matrix import instance_suffix


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    meta = getattr(case, "meta", None)
    mode = getattr(getattr(getattr(meta, "generation", None), "mode", None), "value", "positive")
    if mode == "positive":
        case.body = _pruned(getattr(case.operation, "path", ""), case.body)
    return case


def _pruned(path: str, body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    if path == "/pipelines" and isinstance(body.get("jobs"), dict):
        jobs: dict[str, Any] = {}
        taken: set[str] = set()
        for key, job in body["jobs"].items():
            short = str(key)[:_KEY]
            if short in jobs:
                continue
            if isinstance(job, dict):
                job.pop("needs", None)
                _real_time(job)
                if not _matrix(job, short, taken):
                    continue
            else:
                taken.add(short)
            jobs[short] = job
        body["jobs"] = jobs
    elif path == "/jobs":
        if isinstance(body.get("id"), str):
            body["id"] = body["id"][:_KEY]
        _real_time(body)
        _matrix(body, str(body.get("id", "")), set())
    return body


def _real_time(job: dict[str, Any]) -> None:
    if isinstance(job.get("not-before"), str):
        job["not-before"] = "2026-12-01T02:00:00Z"


_KEY = 20  # characters of a job's key kept: with a matrix value (a float takes 24), <= 100


def _matrix(job: dict[str, Any], key: str, taken: set[str]) -> bool:
    """Prune the job's matrix to one key whose values each make a job id no other job of the
    file makes; False when the job itself would make one already taken. One key, because the
    ids of two keys' combinations can meet: ("x", "") and ("", "x") both end in "-x"."""
    strategy = job.get("strategy")
    matrix = strategy.get("matrix") if isinstance(strategy, dict) else None
    if not isinstance(matrix, dict):
        return _take(key, taken)
    matrix.pop("exclude", None)
    matrix.pop("include", None)
    for name in list(matrix)[1:]:
        del matrix[name]
    for name, values in matrix.items():
        if isinstance(values, list):
            kept: list[Any] = []
            for value in values[:6]:
                value = value[:10] if isinstance(value, str) else value
                suffix = instance_suffix({name: value})
                if _take(f"{key}-{suffix}" if suffix else key, taken):
                    kept.append(value)
            matrix[name] = kept
            if not kept:
                del matrix[name]
    if not matrix:
        job.pop("strategy")
        return _take(key, taken)
    return True


def _take(job_id: str, taken: set[str]) -> bool:
    if job_id in taken:
        return False
    taken.add(job_id)
    return True
