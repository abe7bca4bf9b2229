"""GitHub Actions, as far as the action's tests need it, written from the reference
(shared/reference/github-actions.md §1, §2, §5 and GitHub's metadata and workflow syntax):

- `ActionFile` / `WorkflowFile`: pydantic models of the metadata rules (unknown keys are errors);
- `evaluate` / `interpolate`: the `${{ }}` expression language (the subset these files use;
  anything else is an error, so a test cannot pass by skipping an expression);
- `run_step`: runs a composite action's `run:` step the way the runner does;
- `parse_env_file`: reads `GITHUB_OUTPUT` (`name=value` and `name<<DELIMITER` blocks).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from tests.processes import default_signals, marked_env

# --- metadata models ---------------------------------------------------------------------------

ID = r"^[A-Za-z_][A-Za-z0-9_-]*$"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


BRANDING_COLORS = _words("white black yellow blue green orange red purple gray-dark")
# Feather v4.28.0 icons (a subset: enough to catch a typo) and the ones GitHub excludes.
FEATHER_ICONS = _words(
    "activity airplay alert-circle alert-octagon alert-triangle anchor aperture archive award "
    "bar-chart bar-chart-2 battery bell book book-open bookmark box briefcase calendar camera "
    "check check-circle check-square chevrons-right clipboard clock cloud cloud-lightning code "
    "command compass copy cpu database disc download download-cloud droplet edit eye feather "
    "file file-text filter flag folder gift git-branch git-commit git-merge git-pull-request "
    "globe grid hard-drive hash heart home inbox info layers layout life-buoy link list lock "
    "map monitor moon package paperclip pause play play-circle power printer radio refresh-cw "
    "repeat rss save search send server settings shield shopping-cart sliders star sun target "
    "terminal thermometer thumbs-up trending-up truck tv type umbrella upload upload-cloud user "
    "users video watch wifi wind zap"
)
EXCLUDED_ICONS = _words(
    "coffee columns divide divide-circle divide-square frown hexagon key meh mouse-pointer "
    "smile tool x-octagon"
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ActionInput(Strict):
    description: StrictStr = Field(min_length=1)
    required: StrictBool = False
    default: StrictStr | None = None  # inputs are strings: `default: true` is a YAML bool
    deprecationMessage: StrictStr | None = None  # GitHub's spelling


class ActionOutput(Strict):
    description: StrictStr = Field(min_length=1)
    value: StrictStr  # required for composite actions


class CompositeStep(Strict):
    """A step of `runs.steps`. Composite steps take fewer keys than workflow steps: no
    `timeout-minutes` (actions/runner#1979), and `shell` is required for `run`."""

    name: StrictStr | None = None
    id: StrictStr | None = Field(None, pattern=ID)
    if_: StrictStr | None = Field(None, alias="if")
    run: StrictStr | None = None
    shell: StrictStr | None = None
    uses: StrictStr | None = None
    with_: dict[str, StrictStr] | None = Field(None, alias="with")
    env: dict[str, StrictStr] | None = None
    working_directory: StrictStr | None = Field(None, alias="working-directory")
    continue_on_error: StrictBool | StrictStr | None = Field(None, alias="continue-on-error")

    @model_validator(mode="after")
    def _one_kind(self) -> CompositeStep:
        if (self.run is None) == (self.uses is None):
            raise ValueError("a step has either `run` or `uses`")
        if self.run is not None and not self.shell:
            raise ValueError("a composite `run` step needs `shell`")
        if self.uses is not None and self.shell:
            raise ValueError("`shell` is for `run` steps")
        return self


class Runs(Strict):
    using: Literal["composite"]
    steps: list[CompositeStep] = Field(min_length=1)


class Branding(Strict):
    icon: StrictStr
    color: StrictStr

    @model_validator(mode="after")
    def _icon(self) -> Branding:
        if self.color not in BRANDING_COLORS:
            raise ValueError(f"branding color {self.color!r}: one of {sorted(BRANDING_COLORS)}")
        if self.icon in EXCLUDED_ICONS or self.icon not in FEATHER_ICONS:
            raise ValueError(f"branding icon {self.icon!r} is not an allowed Feather icon")
        return self


class ActionFile(Strict):
    name: StrictStr = Field(min_length=1)
    description: StrictStr = Field(min_length=1)  # the Marketplace needs it
    author: StrictStr | None = None
    inputs: dict[StrictStr, ActionInput] = {}
    outputs: dict[StrictStr, ActionOutput] = {}
    runs: Runs
    branding: Branding | None = None

    @model_validator(mode="after")
    def _ids(self) -> ActionFile:
        for name in [*self.inputs, *self.outputs]:
            if not re.match(ID, name):
                raise ValueError(f"{name!r}: ids start with a letter or _, then [A-Za-z0-9_-]")
        ids = [s.id for s in self.runs.steps if s.id]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate step ids: {ids}")
        return self


class CallInput(Strict):
    description: StrictStr = Field(min_length=1)
    type: Literal["boolean", "number", "string"]  # required for workflow_call
    required: StrictBool = False
    default: StrictStr | StrictBool | int | float | None = None

    @model_validator(mode="after")
    def _default_type(self) -> CallInput:
        kinds = {"boolean": (bool,), "number": (int, float), "string": (str,)}[self.type]
        if self.default is not None and (
            not isinstance(self.default, kinds)
            or (self.type == "number" and isinstance(self.default, bool))
        ):
            raise ValueError(f"default {self.default!r} is not a {self.type}")
        return self


class CallSecret(Strict):
    description: StrictStr = Field(min_length=1)
    required: StrictBool = False


class CallOutput(Strict):
    description: StrictStr = Field(min_length=1)
    value: StrictStr = Field(pattern=r"^\$\{\{\s*jobs\.[\w-]+\.outputs\.[\w-]+\s*\}\}$")


class WorkflowCall(Strict):
    inputs: dict[StrictStr, CallInput] = {}
    secrets: dict[StrictStr, CallSecret] = {}
    outputs: dict[StrictStr, CallOutput] = {}


class DispatchInput(Strict):
    description: StrictStr = Field(min_length=1)
    type: Literal["boolean", "choice", "number", "environment", "string"] = "string"
    required: StrictBool = False
    default: StrictStr | StrictBool | int | float | None = None
    options: list[StrictStr] | None = None


class WorkflowDispatch(Strict):
    inputs: dict[StrictStr, DispatchInput] = {}


class Cron(Strict):
    cron: StrictStr = Field(pattern=r"^\S+( \S+){4}$")


class Triggers(Strict):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    workflow_call: WorkflowCall | None = None
    workflow_dispatch: WorkflowDispatch | None = None
    schedule: list[Cron] | None = None

    @model_validator(mode="after")
    def _known_events(self) -> Triggers:
        known = {"push", "pull_request", "pull_request_target", "workflow_run", "release"}
        unknown = set(self.model_extra or {}) - known
        if unknown:
            raise ValueError(f"unexpected events: {sorted(unknown)}")
        return self


class WorkflowStep(Strict):
    name: StrictStr | None = None
    id: StrictStr | None = Field(None, pattern=ID)
    if_: StrictStr | None = Field(None, alias="if")
    run: StrictStr | None = None
    shell: StrictStr | None = None
    uses: StrictStr | None = None
    with_: dict[str, StrictStr | StrictBool | int | float] | None = Field(None, alias="with")
    env: dict[str, StrictStr | StrictBool | int | float] | None = None
    working_directory: StrictStr | None = Field(None, alias="working-directory")
    continue_on_error: StrictBool | StrictStr | None = Field(None, alias="continue-on-error")
    timeout_minutes: int | StrictStr | None = Field(None, alias="timeout-minutes")

    @model_validator(mode="after")
    def _one_kind(self) -> WorkflowStep:
        if (self.run is None) == (self.uses is None):
            raise ValueError("a step has either `run` or `uses`")
        return self


class Job(Strict):
    """A job that runs steps, or one that calls a reusable workflow (fewer keys allowed)."""

    name: StrictStr | None = None
    needs: StrictStr | list[StrictStr] | None = None
    if_: StrictStr | None = Field(None, alias="if")
    permissions: dict[str, Literal["read", "write", "none"]] | None = None
    concurrency: StrictStr | dict[str, Any] | None = None
    strategy: dict[str, Any] | None = None
    # steps jobs
    runs_on: StrictStr | list[StrictStr] | None = Field(None, alias="runs-on")
    steps: list[WorkflowStep] | None = None
    outputs: dict[str, StrictStr] | None = None
    env: dict[str, StrictStr] | None = None
    timeout_minutes: int | StrictStr | None = Field(None, alias="timeout-minutes")
    continue_on_error: StrictBool | StrictStr | None = Field(None, alias="continue-on-error")
    environment: StrictStr | dict[str, str] | None = None
    # reusable-workflow calls
    uses: StrictStr | None = None
    with_: dict[str, StrictStr | StrictBool | int | float] | None = Field(None, alias="with")
    secrets: Literal["inherit"] | dict[str, StrictStr] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Job:
        steps_keys = ("runs_on", "steps", "outputs", "env", "timeout_minutes", "environment")
        if self.uses is not None:
            extra = [k for k in steps_keys if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"a job that calls a workflow takes no {extra}")
        elif self.runs_on is None or not self.steps:
            raise ValueError("a job needs `runs-on` and `steps` (or `uses`)")
        elif self.with_ is not None or self.secrets is not None:
            raise ValueError("`with`/`secrets` are for jobs that call a workflow")
        return self

    @property
    def need_list(self) -> list[str]:
        return [self.needs] if isinstance(self.needs, str) else list(self.needs or [])


class WorkflowFile(Strict):
    name: StrictStr | None = None
    run_name: StrictStr | None = Field(None, alias="run-name")
    on: Triggers
    permissions: dict[str, Literal["read", "write", "none"]] | None = None
    concurrency: StrictStr | dict[str, Any] | None = None
    env: dict[str, StrictStr] | None = None
    jobs: dict[StrictStr, Job] = Field(min_length=1)

    @model_validator(mode="after")
    def _needs(self) -> WorkflowFile:
        for job_id, job in self.jobs.items():
            if not re.match(ID, job_id):
                raise ValueError(f"job id {job_id!r}")
            for need in job.need_list:
                if need not in self.jobs:
                    raise ValueError(f"jobs.{job_id}.needs: unknown job {need!r}")
        return self


def load_yaml(path: Path) -> dict[str, Any]:
    """The document, with YAML 1.1's `on: ...` (read as True) given back its name."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), f"{path}: not a mapping"
    if True in document:
        document["on"] = document.pop(True)
    return document


# --- expressions -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[!<>()\[\],.])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_STATUS = ("success", "failure", "cancelled", "always")


class ExpressionError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, "", 0)


def _text(value: Any) -> str:
    """A value as an interpolated string (GitHub's own conversions)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()  # GitHub compares strings ignoring case
    if isinstance(a, str) != isinstance(b, str):
        try:  # a string against a number compares as numbers
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return bool(a == b)


class _Parser:
    def __init__(self, text: str, context: Mapping[str, Any], status: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.context = context
        self.status = status
        self.text = text

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ExpressionError(f"unexpected end of {self.text!r}")
        tok = self.toks[self.i]
        if expected is not None and tok[1] != expected:
            raise ExpressionError(f"expected {expected!r}, got {tok[1]!r} in {self.text!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        value = self.or_()
        if self.i != len(self.toks):
            raise ExpressionError(f"trailing {self.toks[self.i :]} in {self.text!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        left = self.unary()
        op = self.peek()
        if op in ("==", "!=", "<", ">", "<=", ">="):
            self.take()
            right = self.unary()
            if op == "==":
                return _equal(left, right)
            if op == "!=":
                return not _equal(left, right)
            a, b = float(left or 0), float(right or 0)
            return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, tok = self.take()
        if tok == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(tok)
        if kind != "name":
            raise ExpressionError(f"unexpected {tok!r} in {self.text!r}")
        if tok in ("true", "false"):
            return tok == "true"
        if tok == "null":
            return None
        if self.peek() == "(":
            return self.call(tok)
        if tok not in self.context:
            raise ExpressionError(f"unknown context {tok!r} in {self.text!r}")
        value: Any = self.context[tok]
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = _text(self.or_())
                self.take("]")
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    def call(self, name: str) -> Any:
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.or_())
            if self.peek() == ",":
                self.take()
        self.take(")")
        if name in _STATUS:
            return {
                "always": True,
                "success": self.status == "success",
                "failure": self.status == "failure",
                "cancelled": self.status == "cancelled",
            }[name]
        if name == "startsWith":
            return _text(args[0]).lower().startswith(_text(args[1]).lower())
        if name == "contains":
            return _text(args[1]).lower() in _text(args[0]).lower()
        raise ExpressionError(f"function {name}() is not modelled here")


def evaluate(text: str, context: Mapping[str, Any], status: str = "success") -> Any:
    """The value of one expression (the part inside `${{ }}`)."""
    return _Parser(text, context, status).parse()


def interpolate(text: str, context: Mapping[str, Any]) -> str:
    """A string with every `${{ expr }}` replaced by its value, as the runner does."""
    return EXPRESSION.sub(lambda m: _text(evaluate(m.group(1), context)), text)


def condition(if_: str | None, context: Mapping[str, Any], status: str = "success") -> bool:
    """Whether a step with this `if:` runs. No status function in it means `success() && ...`;
    a step without `if:` runs on success only."""
    text = (if_ or "success()").strip()
    match = re.fullmatch(r"\$\{\{(.*)\}\}", text, re.S)
    text = match.group(1) if match else text
    if not re.search(r"\b(" + "|".join(_STATUS) + r")\(", text):
        text = f"success() && ({text})"
    return truthy(evaluate(text, context, status))


def references(text: str, context: str) -> set[str]:
    """Names used as `context.NAME` inside the expressions of `text`."""
    found: set[str] = set()
    for expr in EXPRESSION.findall(text):
        found |= set(re.findall(rf"\b{context}\.([A-Za-z0-9_-]+)", expr))
    return found


# --- running steps -----------------------------------------------------------------------------


def run_step(
    step: Mapping[str, Any],
    context: Mapping[str, Any],
    env: Mapping[str, str],
    workdir: Path,
    *,
    background: bool = False,
    **popen: Any,
) -> subprocess.Popen[bytes] | subprocess.CompletedProcess[bytes]:
    """Run a `shell: bash` step as the runner does: its script in a file, run by
    `bash --noprofile --norc -eo pipefail FILE`, its `env:` (interpolated) over `env`."""
    assert step.get("shell") == "bash", "only bash steps are simulated"
    script = workdir / f"step-{os.urandom(4).hex()}.sh"
    script.write_text(step["run"], encoding="utf-8")
    step_env = {k: interpolate(v, context) for k, v in (step.get("env") or {}).items()}
    full_env = marked_env({**env, **step_env}, inherit=False)
    argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
    if background:
        return subprocess.Popen(
            argv, env=full_env, cwd=workdir, preexec_fn=default_signals, **popen
        )
    return subprocess.run(argv, env=full_env, cwd=workdir, check=False, **popen)


def parse_env_file(text: str) -> dict[str, str]:
    """`GITHUB_OUTPUT`/`GITHUB_ENV` as the runner reads them: `name=value` lines and
    `name<<DELIMITER` ... `DELIMITER` blocks. A block without its closing line is an error."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        eq, heredoc = line.find("="), line.find("<<")
        if heredoc != -1 and (eq == -1 or heredoc < eq):
            name, delimiter = line[:heredoc], line[heredoc + 2 :]
            body: list[str] = []
            while True:
                if i >= len(lines):
                    raise ValueError(f"{name}: no closing {delimiter!r}")
                if lines[i] == delimiter:
                    i += 1
                    break
                body.append(lines[i])
                i += 1
            values[name] = "\n".join(body)
        elif eq > 0:
            values[line[:eq]] = line[eq + 1 :]
        else:
            raise ValueError(f"not a command: {line!r}")
    return values
