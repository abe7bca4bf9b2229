"""The action's runner modes: entrypoint.sh turns their inputs into `clore-run runner ...`, the
record goes up as an artifact after a start, and the release step leaves a started runner's
servers to it (runner-stop and the reaper give them back) but cleans up after any other end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gha import condition
from tests.test_action import _context, _entrypoint, action, step_named
from tests.test_action import fake_cli as fake_cli

RECORD = '{"runners":[],"version":1}'


@pytest.mark.parametrize(
    ("env", "argv"),
    [
        (
            {"INPUT_MODE": "runner-start"},
            ["runner", "start"],
        ),
        (
            {
                "INPUT_MODE": "runner-start", "INPUT_GPU": "RTX 4090", "INPUT_GPU_COUNT": "2",
                "INPUT_MAX_PRICE": "0.6", "INPUT_SPOT": "true", "INPUT_IMAGE": "pytorch/pytorch",
                "INPUT_MAX_MINUTES": "45", "INPUT_RUNNERS": "3",
                "INPUT_CURRENCY": "USD-Blockchain", "INPUT_BUDGET": "2",
                "INPUT_RUNNER_GROUP": "5", "CLORE_RUNNER_RECORD_FILE": "/t/record.json",
                "CLORE_RUN_LEDGER": "/t/ledger.db", "INPUT_PIPELINE": "ignored.yml",
            },
            [
                "runner", "start", "--gpu", "RTX 4090", "--gpu-count", "2", "--max-price", "0.6",
                "--spot", "--image", "pytorch/pytorch", "--max-minutes", "45", "--runners", "3",
                "--currency", "USD-Blockchain", "--budget", "2", "--runner-group", "5",
                "--record-file", "/t/record.json", "--ledger", "/t/ledger.db",
            ],
        ),
        (
            {"INPUT_MODE": "runner-start", "INPUT_SPOT": "false"},
            ["runner", "start"],
        ),
        (
            {"INPUT_MODE": "runner-stop", "INPUT_RUNNER_RECORD": RECORD,
             "INPUT_COMMENT": "auto", "INPUT_COMMENT_HEADER": "gpu"},
            ["runner", "stop", "--record-json", RECORD, "--comment", "auto",
             "--comment-header", "gpu"],
        ),
        (
            {"INPUT_MODE": "runner-stop"},  # no record: clore-run says what to pass
            ["runner", "stop", "--record-json", ""],
        ),
    ],
)  # fmt: skip
def test_entrypoint_turns_runner_inputs_into_arguments(
    env: dict[str, str], argv: list[str], fake_cli: Path, tmp_path: Path
) -> None:
    result = _entrypoint(env, fake_cli, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["argv"] == argv


def test_entrypoint_masks_the_runner_and_comment_tokens(fake_cli: Path) -> None:
    env = {
        "INPUT_MODE": "runner-stop",
        "CLORE_RUNNER_TOKEN": "github_pat_secret_1234",
        "CLORE_GITHUB_TOKEN": "ghs_comment_secret_5678",
    }
    lines = _entrypoint(env, fake_cli).stdout.splitlines()
    assert lines[:2] == [
        "::add-mask::github_pat_secret_1234",
        "::add-mask::ghs_comment_secret_5678",
    ]


def test_entrypoint_refuses_an_unknown_mode(fake_cli: Path) -> None:
    result = _entrypoint({"INPUT_MODE": "runner-begin", "INPUT_PIPELINE": "p.yml"}, fake_cli)
    assert result.returncode == 2 and "'mode' must be run, submit, runner-start or runner-stop" in (
        result.stdout
    )
    assert "argv" not in result.stdout


@pytest.mark.parametrize(
    ("mode", "outcome", "status", "releases"),
    [
        ("run", "success", "success", True),
        ("run", "failure", "failure", True),
        ("runner-start", "success", "success", False),  # the servers are the runners' now
        ("runner-start", "failure", "failure", True),
        ("runner-start", "cancelled", "cancelled", True),
        ("runner-stop", "failure", "failure", True),
    ],
)
def test_the_release_step_leaves_a_started_runner_alone(
    mode: str, outcome: str, status: str, releases: bool
) -> None:
    ctx = _context(mode=mode)
    ctx["steps"]["run"]["outcome"] = outcome
    assert condition(step_named("Release rented servers").get("if"), ctx, status) is releases


@pytest.mark.parametrize(
    ("mode", "artifact", "uploads"),
    [("runner-start", "clore-runner-record-x", True), ("runner-start", "", False),
     ("run", "clore-runner-record-x", False)],
)  # fmt: skip
def test_the_record_is_uploaded_after_a_start(mode: str, artifact: str, uploads: bool) -> None:
    step = step_named("Upload the runner record")
    ctx = _context(mode=mode)
    ctx["steps"]["run"]["outputs"]["record-artifact"] = artifact
    assert condition(step.get("if"), ctx, "success") is uploads
    assert step["with"]["name"] == "${{ steps.run.outputs.record-artifact }}"
    assert step["with"]["path"] == "${{ steps.run.outputs.record-path }}"


def test_the_record_file_the_start_writes_is_the_one_the_artifact_holds() -> None:
    from runner.backends.runner_record import RECORD_FILE

    run = step_named("Run the pipeline")
    assert run["env"]["CLORE_RUNNER_RECORD_FILE"].endswith("/" + RECORD_FILE)
    outputs = action()["outputs"]
    assert outputs["label"]["value"] == "${{ steps.run.outputs.label }}"
