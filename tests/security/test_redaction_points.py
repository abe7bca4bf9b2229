"""Every place a run writes text takes the known secrets out: logs, reports, the step summary,
step outputs, the console. The key reaches them through a job's `env:`, its `name:` and its
output (a GPU name the server reports would come the same way)."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from runner import redact
from runner.backends.local import LocalBackend
from runner.engine.run_command import RunOptions, execute
from runner.report import ReportPaths, github_actions
from runner.spec.loader import parse_pipeline

KEY = "ck-live-4f9a8b7c6d5e"


def test_the_key_given_to_a_job_reaches_no_written_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLORE_API_KEY", KEY)
    text = textwrap.dedent(
        """\
        jobs:
          leak:
            name: "gpu ${{ env.CLORE_API_KEY }}"
            env: {HANDED: "${{ env.CLORE_API_KEY }}"}
            run: |
              echo "GPU: NVIDIA $HANDED"
              printf 'split %s' "${HANDED:0:7}"; printf '%s\\n' "${HANDED:7}"
              echo "reason $HANDED" >&2
              exit 3
        """
    )
    pipeline = parse_pipeline(text, "p.yml", {"CLORE_API_KEY": KEY})
    out, ws = tmp_path / "out", tmp_path / "ws"
    ws.mkdir()
    console = io.StringIO()
    options = RunOptions(out_dir=out, workspace_root=ws, backoff=lambda n: 0.01)
    _, code = execute(pipeline, LocalBackend(), options, console)
    assert code == 1
    summary, outputs = tmp_path / "step-summary.md", tmp_path / "outputs"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    env["GITHUB_OUTPUT"] = str(outputs)
    paths = ReportPaths(out / "junit.xml", out / "summary.json", out / "summary.md")
    annotations = io.StringIO()
    github_actions.publish(paths, env, annotations)

    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    written[summary] = summary.read_bytes()
    written[outputs] = outputs.read_bytes()
    assert any(b"NVIDIA ***" in data for data in written.values())  # the job ran and printed
    assert {p.name for p in written} >= {"leak.log", "junit.xml", "summary.json", "summary.md"}
    for path, data in written.items():
        assert KEY.encode() not in data, path
    assert KEY not in console.getvalue()
    assert KEY not in annotations.getvalue()


def test_a_secret_gone_from_the_environment_is_still_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve takes its secrets out of os.environ; they must stay known to the redaction."""
    monkeypatch.delenv("CLORE_RUN_TOKEN", raising=False)
    redact.register("serve-token-0123456789")
    try:
        summary = tmp_path / "s.md"
        github_actions.append_step_summary(summary, "token serve-token-0123456789\n")
        assert summary.read_text() == "token ***\n"
    finally:
        redact.forget_all()
