"""Pipeline file -> validated, expanded, immutable `Pipeline`.

Every problem becomes a located Diagnostic; all of a file's problems are reported together, in
file order, as one SpecError. Nothing else escapes for any input.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from runner.backends.registry import pipeline_keys
from runner.core import graph
from runner.core.model import (
    Condition,
    GpuAsk,
    Job,
    Location,
    Pipeline,
    Priority,
    Provisioning,
    SpecWarning,
)
from runner.spec import matrix as matrix_mod
from runner.spec.coercions import iso_time
from runner.spec.diagnostics import Diagnostic, KeyPath, SpecError, did_you_mean, format_path
from runner.spec.expressions import Contexts, ExpressionError, parse_condition, substitute
from runner.spec.limits import MAX_JOB_ID
from runner.spec.models import Defaults, JobSpec, PipelineHeader, Strategy, field_name
from runner.spec.pydantic_errors import diagnostics_from
from runner.spec.yaml_source import Source, parse_yaml

_M = TypeVar("_M", bound=BaseModel)

DEFAULT_TIMEOUT_MINUTES = 60.0
MAX_JOBS = 10_000  # per pipeline, matrices expanded: beyond it a queue holds a file, not a plan
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # fullmatch: `$` would allow "id\n"
_NOT_SUBSTITUTED = frozenset({"if", "strategy", "needs"})
_NUMBERS_AND_SWITCHES = frozenset(
    {
        *("count", "min-vram-gb", "max-price", "min-reliability", "retries", "concurrency"),
        *("budget", "timeout-minutes", "estimate-minutes"),
        *("spot", "workspace", "continue-on-error", "fail-fast"),
    }
)


def load_pipeline(path: str | Path, environ: Mapping[str, str] | None = None) -> Pipeline:
    """Read and validate a pipeline file. Raises SpecError (exit 2) for any bad input."""
    display = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise _fatal(display, "file not found", "check the path") from None
    except IsADirectoryError:
        raise _fatal(display, "is a directory, not a pipeline file") from None
    except OSError as exc:
        raise _fatal(display, f"cannot read the file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _fatal(display, "the file is not UTF-8 text") from None
    return parse_pipeline(text, display, environ)


def parse_pipeline(text: str, file: str, environ: Mapping[str, str] | None = None) -> Pipeline:
    source = parse_yaml(text, file)
    env = dict(os.environ if environ is None else environ)
    builder = _PipelineBuilder(source, env)
    return builder.build()


def _fatal(file: str, message: str, hint: str = "") -> SpecError:
    return SpecError([Diagnostic(file, 1, 1, (), message, hint)])


@dataclass
class _Draft:
    """A job instance before its needs are resolved."""

    key: str
    id: str
    combo: dict[str, Any]
    spec: JobSpec
    defaults: Defaults
    needs: list[str] = field(default_factory=list)
    fail_fast: bool = True


class _PipelineBuilder:
    def __init__(self, source: Source, environ: dict[str, str]) -> None:
        self.source = source
        self.environ = environ
        self.problems: list[Diagnostic] = list(source.problems)  # every problem at once

    def build(self) -> Pipeline:
        header = self._header()
        jobs_raw = self._jobs_raw()
        defaults_raw = self.source.data.get("defaults") if jobs_raw is not None else None
        drafts: list[_Draft] = []
        if jobs_raw is not None:
            self._check_needs(jobs_raw)
            for key, raw in jobs_raw.items():
                drafts.extend(self._job_instances(key, raw, defaults_raw or {}))
                if len(drafts) > MAX_JOBS:  # each job's matrix is capped before it is built
                    self.problems.append(
                        self.source.error(
                            ("jobs", key),
                            f"the pipeline makes more than {MAX_JOBS:,} jobs (matrices included)",
                            "split it into several pipelines",
                        )
                    )
                    break
        jobs = self._resolve(drafts)  # even after problems: a cycle is reported with them
        if self.problems or header is None:
            problems = _unique([self._quote_hint(d) for d in self.problems])
            # YAML 1.1's surprises stay said beside the errors: they may be their cause
            raise SpecError(problems, warnings=self._retyped_warnings())
        env = dict(header.env)
        return Pipeline(
            name=header.name or Path(self.source.file).stem,
            jobs=tuple(_job(self.source, d, env, i) for i, d in enumerate(jobs)),
            concurrency=header.concurrency,
            budget_usd=header.budget,
            timeout_s=header.timeout_minutes * 60 if header.timeout_minutes else None,
            hosts=tuple(header.hosts),
            source=self.source.file,
            provisioning=Provisioning(header.provision),
            warnings=self._retyped_warnings(),
            backend_keys=_backend_keys("pipeline", lambda name: _given(header, name)),
        )

    def _quote_hint(self, problem: Diagnostic) -> Diagnostic:
        """`name: 3.10` fails as "got 3.1": say that quoting is the fix."""
        if problem.hint or not problem.message.startswith("input should be"):
            return problem  # a hint only where it applies: not to an unknown key, say
        retyped = self.source.retyped.get(problem.path)
        if retyped is not None:
            return dataclasses.replace(problem, hint=f'quote it: "{retyped[0]}"')
        value = _value_at(self.source.data, problem.path)
        if problem.message.startswith("input should be a valid string") and isinstance(
            value, (int, float)
        ):  # `type: 4090`: a number where a GPU name is meant
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            return dataclasses.replace(problem, hint=f'quote it: "{text}"')
        return problem

    def _retyped_warnings(self) -> tuple[SpecWarning, ...]:
        """Unquoted values YAML 1.1 read as numbers or booleans where a string was meant:
        `python: [3.10]` makes job `t-3.1`, `DEBUG: yes` exports "true"."""
        out = []
        for path, (text, value) in self.source.retyped.items():
            if not _string_meant(path):
                continue
            shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
            what = "" if isinstance(value, bool) else "the number "
            line, col = self.source.locate(path)
            out.append(
                SpecWarning(
                    Location(self.source.file, line, col),
                    f"{format_path(path)}: unquoted {text} is read as {what}{shown}"
                    f' (quote it: "{text}")',
                )
            )
        return tuple(sorted(out, key=lambda w: (w.location.line, w.location.column)))

    # -- top level -------------------------------------------------------------------------

    def _header(self) -> PipelineHeader | None:
        data = self.source.data
        if not isinstance(data, dict):
            self.problems.append(
                self.source.error((), "the top level must be a mapping", "start with `jobs:`")
            )
            return None
        if "jobs" not in data:
            self.problems.append(self.source.error((), "no `jobs` in the pipeline", "add `jobs:`"))
            return None
        settings = {k: v for k, v in data.items() if k not in ("jobs", "defaults")}
        settings = self._substitute(settings, Contexts({}, self.environ), ())
        jobs = {} if data["jobs"] is None else data["jobs"]  # `jobs:` alone: _jobs_raw says so
        if data.get("defaults", {}) is None:  # `defaults:` with every key commented out
            data = {**data, "defaults": {}}
        header: PipelineHeader | None = self._validate(
            PipelineHeader, {**data, **settings, "jobs": jobs}, ()
        )
        return header

    def _jobs_raw(self) -> dict[str, Any] | None:
        """The `jobs` mapping, with its ids checked; None when there is nothing to expand."""
        data = self.source.data
        if not isinstance(data, dict) or "jobs" not in data:
            return None
        jobs = data["jobs"]
        if not isinstance(jobs, dict) or not jobs:
            if isinstance(jobs, dict) or jobs is None:  # a non-mapping is the model's to report
                self.problems.append(
                    self.source.error(("jobs",), "`jobs` must be a non-empty mapping of job ids")
                )
            return None
        if not isinstance(data.get("defaults") or {}, dict):
            return None  # the model reports it
        for key in jobs:
            if not _JOB_KEY.fullmatch(key):
                self.problems.append(
                    self.source.error(
                        ("jobs", key),
                        f"invalid job id '{key}'",
                        "start with a letter or _, then letters, digits, - or _",
                        key=True,
                    )
                )
        return jobs

    # -- one job key -> instances ----------------------------------------------------------

    def _job_instances(self, key: str, raw: Any, raw_defaults: dict[str, Any]) -> list[_Draft]:
        path: KeyPath = ("jobs", key)
        if not isinstance(raw, dict):
            self.problems.append(self.source.error(path, "a job must be a mapping with `run:`"))
            return []
        strategy: Strategy | None = None
        if raw.get("strategy") is not None:  # `strategy: null` is none, as for every key
            strategy = self._validate(Strategy, raw["strategy"], (*path, "strategy"))
            if strategy is None:
                return []
        combos = self._combinations(strategy, path)
        drafts = []
        for combo in combos:
            ctx = Contexts(combo, self.environ, in_matrix_job=strategy is not None)
            job_raw = self._substitute(raw, ctx, path)
            defaults_raw = self._substitute(raw_defaults, ctx, ("defaults",))
            spec: JobSpec | None = self._validate(JobSpec, job_raw, path)
            defaults: Defaults | None = self._validate(Defaults, defaults_raw, ("defaults",))
            if not self._check(key, job_raw, defaults_raw) or spec is None or defaults is None:
                continue
            suffix = matrix_mod.instance_suffix(combo) if strategy is not None else ""
            job_id = f"{key}-{suffix}" if suffix else key
            fail_fast = strategy.fail_fast if strategy is not None else True
            drafts.append(_Draft(key, job_id, combo, spec, defaults, fail_fast=fail_fast))
        return drafts

    def _check(self, key: str, job: dict[str, Any], defaults: dict[str, Any]) -> bool:
        """What the models cannot say alone: a script to run, a known `if:`, a zoned time.

        Works on the raw values, so these are reported even when the models found problems.
        """
        path: KeyPath = ("jobs", key)
        before = len(self.problems)
        own = job.get("run")  # `run: null` is no script: the default's, if any, applies
        if own is None and defaults.get("run") is None:
            self.problems.append(self.source.error(path, "no `run:` script", "add `run: ...`"))
        # Both scripts, the default's even where a job has its own: a bad default is a bad
        # file, as its other keys are (and as the schema says).
        for where, run in (((*path, "run"), own), (("defaults", "run"), defaults.get("run"))):
            self._check_script(where, run)
        for where, raw in (((*path, "if"), job), (("defaults", "if"), defaults)):
            if isinstance(raw.get("if"), str):
                try:
                    parse_condition(raw["if"])
                except ExpressionError as exc:
                    self.problems.append(self.source.error(where, str(exc), exc.hint))
        for where, raw in ((path, job), (("defaults",), defaults)):
            self._check_fetched_paths(where, raw)
        for where, raw in (((*path, "not-before"), job), (("defaults", "not-before"), defaults)):
            when = iso_time(raw.get("not-before"))
            if isinstance(when, datetime) and when.tzinfo is None:
                self.problems.append(
                    self.source.error(where, "the time has no zone", "end it with Z or +02:00")
                )
        return len(self.problems) == before

    def _check_script(self, where: KeyPath, run: Any) -> None:
        if not isinstance(run, str):
            return  # absent, or not text: the model reports its type
        if not run.strip():
            self.problems.append(self.source.error(where, "the run script is empty"))
        elif "\0" in run:
            self.problems.append(
                self.source.error(
                    where,
                    "the run script holds a NUL character (\\0), which no shell reads",
                    "remove it; pass binary data in a file (artifacts, the workspace)",
                )
            )

    def _check_fetched_paths(self, at: KeyPath, raw: dict[str, Any]) -> None:
        """Artifacts and the junit file are fetched from the job's folder: a path that leaves
        it (`../x`, `/etc/hostname`) would read the server's files, so every backend refuses it
        here rather than each in its own way after the run."""
        for key in ("artifacts", "junit"):
            value = raw.get(key)
            items = [((*at, key), value)] if isinstance(value, str) else []
            if isinstance(value, list):
                items = [((*at, key, i), v) for i, v in enumerate(value) if isinstance(v, str)]
            for where, text in items:
                why = _outside_the_job(text)
                if why:
                    self.problems.append(
                        self.source.error(
                            where,
                            f"'{text}' {why}; only files in the job's folder are fetched",
                            "use a path relative to the job's folder; to fetch a file from "
                            "elsewhere, copy it there at the end of `run:`: cp /path/to/file .",
                        )
                    )

    def _combinations(self, strategy: Strategy | None, path: KeyPath) -> list[dict[str, Any]]:
        if strategy is None:
            return [{}]
        mpath = (*path, "strategy", "matrix")
        try:
            return matrix_mod.expand(strategy.matrix)
        except matrix_mod.MatrixError as exc:
            where = (*mpath, exc.key) if exc.key is not None else mpath
            self.problems.append(self.source.error(where, str(exc), exc.hint))
            return []

    def _substitute(self, value: Any, ctx: Contexts, path: KeyPath) -> Any:
        """Replace `${{ }}` in every string below `value`, iteratively."""
        if isinstance(value, str):
            try:
                return substitute(value, ctx)
            except ExpressionError as exc:
                self.problems += [self.source.error(path, str(e), e.hint) for e in exc.errors]
                return value
        if isinstance(value, dict):
            if path and path[-1] == "env":  # the one mapping whose keys are the user's names
                for name in value:
                    if isinstance(name, str) and "${{" in name:
                        self.problems.append(
                            self.source.error(
                                (*path, name),
                                "expressions are not expanded in names",
                                "use a fixed name; put the expression in the value",
                                key=True,
                            )
                        )
                    elif isinstance(name, str) and not _ENV_NAME.fullmatch(name):
                        # bash could not export it: backends would disagree on what happens
                        self.problems.append(
                            self.source.error(
                                (*path, name),
                                f"'{name}' is not a valid environment variable name",
                                "letters, digits and _, not starting with a digit",
                                key=True,
                            )
                        )
                    if isinstance(value[name], str) and "\0" in value[name]:
                        # no process can be given one: ssh cut the value there, silently
                        self.problems.append(
                            self.source.error(
                                (*path, name),
                                "the value holds a NUL character (\\0), which no process can "
                                "be given in its environment",
                                "remove it; pass binary data in a file (artifacts, the workspace)",
                            )
                        )
            return {
                k: v
                if k in _NOT_SUBSTITUTED and (path == ("defaults",) or _is_job_path(path))
                else self._substitute(v, ctx, (*path, k))
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._substitute(v, ctx, (*path, i)) for i, v in enumerate(value)]
        return value

    def _validate(self, model: type[_M], data: Any, path: KeyPath) -> _M | None:
        """The model's value for `data`, or None: its errors are then among the problems."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            self.problems.extend(diagnostics_from(exc, model, self.source, path))
            return None

    # -- the graph -------------------------------------------------------------------------

    def _check_needs(self, jobs: dict[str, Any]) -> None:
        """Needs name known job keys (checked on the raw file, so every job is checked even
        when another one failed validation)."""
        for key, raw in jobs.items():
            needs = raw.get("needs") if isinstance(raw, dict) else None
            items = (
                [(("jobs", key, "needs"), needs)]
                if isinstance(needs, str)
                else [
                    (("jobs", key, "needs", i), n)
                    for i, n in enumerate(needs if isinstance(needs, list) else [])
                ]
            )
            for where, need in items:
                if not isinstance(need, str):
                    continue  # the model reports the type
                if need == key:
                    self.problems.append(self.source.error(where, f"job '{need}' needs itself"))
                elif need not in jobs:
                    hint = did_you_mean(need, jobs)
                    self.problems.append(self.source.error(where, f"unknown job '{need}'", hint))

    def _resolve(self, drafts: list[_Draft]) -> list[_Draft]:
        """Expand needs on job keys to needs on instance ids; find cycles."""
        by_key: dict[str, list[str]] = {}
        for d in drafts:
            by_key.setdefault(d.key, []).append(d.id)
        self._check_unique_ids(drafts)
        for d in drafts:  # dict.fromkeys: first-seen order, no duplicates, linear time
            # An unknown need or a self-need is reported already (_check_needs): left out
            # here, so a cycle elsewhere still shows in the same pass.
            needs = (n for n in d.spec.needs or [] if n != d.key)
            d.needs = list(dict.fromkeys(i for need in needs for i in by_key.get(need, [])))
        cycle = graph.find_cycle({d.id: d.needs for d in drafts})
        if cycle:
            first = next(d for d in drafts if d.id == cycle[1])
            self.problems.append(
                self.source.error(
                    ("jobs", first.key, "needs"),
                    f"cycle: {' -> '.join(cycle)}",
                    "remove one of these needs",
                )
            )
        return drafts

    def _check_unique_ids(self, drafts: Iterable[_Draft]) -> None:
        seen: dict[str, _Draft] = {}
        for d in drafts:
            if len(d.id) > MAX_JOB_ID:  # it names files: logs/<id>.log, artifacts/<id>/
                self.problems.append(
                    self.source.error(
                        ("jobs", d.key),
                        f"job id '{d.id[:40]}...' is {len(d.id)} characters long",
                        f"keep job ids (with matrix values) to {MAX_JOB_ID} characters",
                        key=True,
                    )
                )
            if d.id in seen:
                other = seen[d.id]
                self.problems.append(
                    self.source.error(
                        ("jobs", d.key),
                        f"job id '{d.id}' is produced twice (also by '{other.key}')",
                        "rename a job or change a matrix value",
                        key=True,
                    )
                )
            seen[d.id] = d


def _job(source: Source, d: _Draft, pipeline_env: dict[str, str], index: int) -> Job:
    """A resolved draft as the core's Job."""
    spec, defaults = d.spec, d.defaults

    def pick(name: str) -> Any:
        value = getattr(spec, name)
        return value if value is not None else getattr(defaults, name)

    line, col = source.locate(("jobs", d.key), key=True)
    label = matrix_mod.instance_label(d.combo)
    base_name = spec.name or d.key
    run = pick("run")
    timeout_min = pick("timeout_minutes") or DEFAULT_TIMEOUT_MINUTES
    estimate = pick("estimate_minutes")
    boot = pick("boot_timeout_minutes")
    not_before = pick("not_before")
    return Job(
        id=d.id,
        name=f"{base_name} ({label})" if label and spec.name is None else base_name,
        run=run,
        index=index,
        needs=tuple(d.needs),
        priority=Priority[(pick("priority") or "normal").upper()],
        timeout_s=float(timeout_min) * 60,
        retries=pick("retries") or 0,
        gpu=_gpu(spec, defaults),
        image=pick("image"),
        env=MappingProxyType({**pipeline_env, **(defaults.env or {}), **(spec.env or {})}),
        workspace=pick("workspace") if pick("workspace") is not None else True,
        artifacts=tuple(pick("artifacts") or ()),
        junit=pick("junit"),
        condition=parse_condition(pick("if_")) if pick("if_") else Condition.SUCCESS,
        not_before=not_before.timestamp() if not_before is not None else None,
        continue_on_error=bool(pick("continue_on_error")),
        group=d.key,
        matrix=MappingProxyType({k: matrix_mod.instance_label({k: v}) for k, v in d.combo.items()}),
        fail_fast=d.fail_fast,
        estimate_s=float(estimate) * 60 if estimate else None,
        boot_timeout_s=float(boot) * 60 if boot else None,
        location=Location(source.file, line, col),
        backend_keys=_backend_keys("job", pick),
    )


def _backend_keys(level: str, value: Callable[[str], Any]) -> Mapping[str, str]:
    """The backends' own keys at `level` that the file gives (`value` reads one by its model
    name), by their names in the file: the backend applies its defaults."""
    given = ((key.name, value(field_name(key.name))) for key in pipeline_keys(level))
    return MappingProxyType({name: v for name, v in given if v is not None})


def _given(model: BaseModel, name: str) -> Any:
    """The value the file gave to field `name` (None when it gave none: not its default)."""
    return getattr(model, name) if name in model.model_fields_set else None


def _gpu(spec: JobSpec, defaults: Defaults) -> GpuAsk | None:
    """Job gpu keys override default gpu keys one by one."""
    if spec.gpu is None and defaults.gpu is None:
        return None
    merged: dict[str, Any] = {}
    for part in (defaults.gpu, spec.gpu):
        if part is not None:
            merged.update({name: getattr(part, name) for name in part.model_fields_set})
    return GpuAsk(
        type=merged.get("type"),
        count=merged.get("count", 1),
        min_vram_gb=float(merged.get("min_vram_gb", 0)),
        max_usd_per_hour=merged.get("max_price"),
        spot=merged.get("spot", False),
        min_reliability=merged.get("min_reliability"),
    )


def _value_at(data: Any, path: KeyPath) -> Any:
    """The raw value at `path` in the parsed file, or None."""
    for part in path:
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (in_list or (isinstance(data, dict) and part in data)):
            return None
        data = data[part]
    return data


def _string_meant(path: KeyPath) -> bool:
    """Whether the value at `path` is read as text: a matrix value (it names the job and is
    substituted as text), an env value, a name, a script... not a count, price or switch."""
    keys = [p for p in path if isinstance(p, str)]
    if "matrix" in keys or (len(path) >= 2 and path[-2] == "env"):
        return True
    return not keys or keys[-1] not in _NUMBERS_AND_SWITCHES


def _outside_the_job(path: str) -> str:
    """Why `path` leads out of the job's folder, or "" when it stays inside."""
    if path.startswith(("/", "~")):
        return "is absolute" if path.startswith("/") else "starts at a home folder"
    if ".." in PurePosixPath(path).parts:
        return "goes up with '..'"
    return ""


def _is_job_path(path: KeyPath) -> bool:
    return len(path) == 2 and path[0] == "jobs"


def _unique(problems: list[Diagnostic]) -> list[Diagnostic]:
    """Matrix instances repeat the same problem; report each once."""
    return list(dict.fromkeys(problems))
