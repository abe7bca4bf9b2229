"""Submissions → jobs with server-wide ids, validated by the pipeline loader itself.

A pipeline's job ids are only unique in its file, so the server prefixes them with the
submission's number: `build` in submission 7 is `s7.build`; needs inside the file follow, and
`after` (ids from earlier submissions) is added to the needs of the file's root jobs.

A single job (POST /jobs) uses the pipeline file's job keys. It is checked by the same loader, as
a one-job pipeline, so a key means the same in both places; only `needs` differ: they name
server ids. Submitted text is parsed with an empty environment: `${{ env.X }}` must not read the
server's own variables (its token, the Clore API key) into a job a client can read back.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from runner.core.model import Job, Pipeline
from runner.spec import trust as trust_names
from runner.spec.diagnostics import Diagnostic, KeyPath, SpecError
from runner.spec.loader import parse_pipeline
from runner.stores.queue.codec import job_to_json

DEFAULT_KEY = "job"
_NOT_JOB_KEYS = ("id", "needs", "trust")  # the request's keys that are not the job's own
_SERVER_ID = re.compile(r"^s[0-9]+\.")


@dataclass(frozen=True)
class Problem:
    """A bad field of a request: where (key path), what, and how to fix it."""

    loc: tuple[str | int, ...]
    msg: str
    hint: str = ""
    line: int | None = None
    column: int | None = None


class SubmissionError(Exception):
    """The request names a field that cannot be accepted (HTTP 422)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(p.msg for p in problems))
        self.problems = tuple(problems)


class UnknownNeeds(SubmissionError):
    """A valid submission needs jobs the queue does not hold (HTTP 409: the same request is
    accepted once they are there; the request itself is not malformed)."""


@dataclass(frozen=True)
class Prepared:
    """A validated submission whose jobs still have their local ids."""

    label: str
    jobs: tuple[Job, ...]
    external: Mapping[str, tuple[str | int, ...]]  # server id needed -> where it was asked
    warnings: tuple[str, ...] = ()


def prepare_pipeline(
    text: str, after: Sequence[str], file: str = "pipeline.yml", trust: str | None = None
) -> Prepared:
    """Parse a pipeline; SubmissionError with located diagnostics when it is not valid. Its
    jobs are of the trust domain `trust` (None: the default one)."""
    domain = _trust(trust, ("query", "trust"))
    try:
        pipeline = parse_pipeline(text, file, environ={})
    except SpecError as exc:
        raise SubmissionError([_located(d, ("body",)) for d in exc.diagnostics]) from None
    roots = [j.id for j in pipeline.jobs if not j.needs]
    jobs = tuple(
        dataclasses.replace(j, needs=(*j.needs, *after) if j.id in roots else j.needs, trust=domain)
        for j in pipeline.jobs
    )
    external = {need: ("query", "after", i) for i, need in enumerate(after)}
    _check_text(jobs)
    surprises = tuple(
        f"line {w.location.line}, column {w.location.column}: {w.text}" for w in pipeline.warnings
    )
    return Prepared(pipeline.name, jobs, external, (*_ignored_settings(pipeline), *surprises))


def prepare_job(body: Mapping[str, Any]) -> Prepared:
    """A single job from a JSON object with the pipeline format's job keys (validated by
    the API's model first), plus `id` (its local key) and `needs` (server ids)."""
    key = body.get("id") or DEFAULT_KEY
    needs = body.get("needs") or []
    needs = [needs] if isinstance(needs, str) else list(needs)
    domain = _trust(body.get("trust"), ("body", "trust"))
    spec = {k: v for k, v in body.items() if k not in _NOT_JOB_KEYS and v is not None}
    text = yaml.safe_dump({"jobs": {key: spec}}, sort_keys=False, allow_unicode=True)
    try:
        pipeline = parse_pipeline(text, "body", environ={})
    except SpecError as exc:
        raise SubmissionError([_field(d, key) for d in exc.diagnostics]) from None
    except yaml.YAMLError as exc:  # a value PyYAML cannot write back, e.g. a lone surrogate
        raise SubmissionError([Problem(("body",), f"cannot read the job: {exc}")]) from None
    jobs = tuple(
        dataclasses.replace(j, needs=tuple(needs), location=None, trust=domain)
        for j in pipeline.jobs
    )
    external = {need: ("body", "needs", i) for i, need in enumerate(needs)}
    _check_text(jobs)
    return Prepared(key, jobs, external)


def with_server_ids(jobs: Iterable[Job], number: int) -> list[Job]:
    """Prefix local ids (and local needs, and matrix groups) with the submission number."""
    local = {j.id for j in jobs}
    prefix = f"s{number}."

    def rename(job_id: str) -> str:
        return prefix + job_id if job_id in local else job_id

    return [
        dataclasses.replace(
            j,
            id=rename(j.id),
            needs=tuple(rename(n) for n in j.needs),
            group=prefix + (j.group or j.id),
        )
        for j in jobs
    ]


def check_known(prepared: Prepared, known: set[str]) -> None:
    """Every server id a submission needs must exist."""
    missing = [
        Problem(where, f"unknown job '{need}'", _id_hint(need))
        for need, where in prepared.external.items()
        if need not in known
    ]
    if missing:
        raise UnknownNeeds(missing)


def _trust(value: str | None, where: tuple[str | int, ...]) -> str:
    """The trust domain asked for, checked as a name (a server reuses only within one)."""
    if value is None or value == "":
        return trust_names.DEFAULT_TRUST
    if not trust_names.is_name(value):
        raise SubmissionError([Problem(where, trust_names.RULE, trust_names.HINT)])
    return value


def _id_hint(need: str) -> str:
    if _SERVER_ID.match(need):
        return "see GET /jobs for the ids the server knows"
    return "needs across submissions name server ids, such as s7.build"


def _located(d: Diagnostic, root: KeyPath) -> Problem:
    return Problem((*root, *d.path), d.message, d.hint, d.line, d.column)


def _field(d: Diagnostic, key: str) -> Problem:
    """A diagnostic on the one-job document, as a path into the request body."""
    path = d.path[2:] if d.path[:2] == ("jobs", key) else ()
    if d.path[:2] == ("jobs", key) and len(d.path) == 2 and "job id" in d.message:
        path = ("id",)
    return Problem(("body", *path), d.message, d.hint)


def _ignored_settings(pipeline: Pipeline) -> tuple[str, ...]:
    """Run-wide settings a shared queue does not apply, said out loud rather than dropped."""
    notes = []
    if pipeline.concurrency != 3:
        notes.append("`concurrency` is ignored: the server's --concurrency applies")
    if pipeline.budget_usd is not None:
        notes.append("`budget` is ignored: the server's --daily-spend-limit applies")
    if pipeline.timeout_s is not None:
        notes.append("`timeout-minutes` of the pipeline is ignored: each job's own applies")
    if pipeline.hosts:
        notes.append("`hosts` is ignored: the server's --host list applies")
    return tuple(notes)


def _check_text(jobs: Sequence[Job]) -> None:
    """Text that is not valid Unicode (a lone surrogate from a `\\ud800` escape) cannot be
    stored, written to a script or passed to a process: refuse it here."""
    for job in jobs:
        try:
            json.dumps(job_to_json(job), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise SubmissionError(
                [Problem(("body",), f"job '{job.id}' has text that is not valid Unicode")]
            ) from None
