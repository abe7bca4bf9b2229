"""Marketplace text is untrusted on every command: a host's listing strings through `offers`,
`doctor` and `plan --backend clore` with GITHUB_ACTIONS=true, and the canary workflow's paste of
doctor's output into the step summary (issue 25, high)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from runner.cli import main
from tests.fakes.clore_api import API_KEY, FakeClore
from tests.gha import load_yaml, run_step

REPO = Path(__file__).resolve().parents[2]
HOST_ID = 88028  # the fake's cheapest RTX 3090: the one every 3090 ask takes
HOSTILE_GPU = (
    "1x RTX 3090\n::add-mask::NVIDIA\n::error title=Clore::rotate key at http://evil.test/\n"
    "```\n## pwned\r\n##[warning]old style\x1b]52;c;ZXZpbA==\x07\x1b[2J"
)
# A line the Actions runner would act on: `::` at its start, or `##[` anywhere.
_COMMAND = re.compile(r"^\s*::(?!add-mask::" + re.escape(API_KEY) + r"$)|##\[", re.MULTILINE)


@pytest.fixture
def hostile(fake_clore: FakeClore, monkeypatch: pytest.MonkeyPatch) -> FakeClore:
    server = fake_clore.servers[HOST_ID]
    server["specs"]["gpu"] = HOSTILE_GPU
    server["specs"]["net"]["cc"] = "US\n::warning::cc"
    server["cuda_version"] = "13.0\x1b[31m\n##[error]cuda"
    server["gpu_array"] = ["RTX 3090\n::notice::array"]
    monkeypatch.setenv("CLORE_API_URL", fake_clore.url)
    monkeypatch.setenv("CLORE_API_KEY", API_KEY)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    fake_clore.enforce_rate_limits = False  # the CLI's client waits on the real clock
    return fake_clore


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out + err


def assert_inert(output: str) -> None:
    assert "rotate key" in output  # the hostile host is shown, not silently dropped
    assert _COMMAND.search(output) is None, output
    assert "\x1b" not in output and "\x07" not in output and "\r" not in output
    assert not re.search(r"^\s{0,3}```", output, re.MULTILINE)


@pytest.mark.slow
def test_offers_table_prints_a_hostile_listing_as_inert_text(
    hostile: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = cli(["offers", "--gpu", "3090"], capsys)
    assert code == 0, output
    assert_inert(output)
    (row,) = [line for line in output.splitlines() if line.startswith(str(HOST_ID))]
    assert "rotate key" in row  # the whole name stayed on its offer's row


@pytest.mark.slow
def test_offers_json_is_json_of_inert_text(
    hostile: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = cli(["offers", "--gpu", "3090", "--json"], capsys)
    assert code == 0, output
    # The key's mask comes first in Actions (stdout, before anything else is printed).
    listed: list[dict[str, Any]] = json.loads(output.split("\n", 1)[1])
    first = next(o for o in listed if o["server_id"] == HOST_ID)
    assert "\n" not in first["gpu_model"] and "\n" not in first["location"]
    assert_inert(output + first["gpu_model"] + first["cuda_version"])


@pytest.mark.slow
def test_offers_no_fit_explanation_quotes_a_hostile_listing_as_inert_text(
    hostile: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = cli(["offers", "--gpu", "3090", "--max-price", "0.001"], capsys)
    assert code == 0 and "no offer fits" in output
    assert_inert(output)


@pytest.mark.slow
def test_doctor_prints_a_hostile_listing_as_inert_text(
    hostile: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = cli(["doctor", "--gpu", "3090"], capsys)
    assert code == 0, output
    assert f"#{HOST_ID}" in output
    assert_inert(output)


@pytest.mark.slow
@pytest.mark.parametrize("ask", ["{type: '3090'}", "{type: '3090', max-price: 0.001}"])
def test_plan_prints_a_hostile_listing_as_inert_text(
    hostile: FakeClore, tmp_path: Path, capsys: pytest.CaptureFixture[str], ask: str
) -> None:
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(f"jobs:\n  train: {{run: x, gpu: {ask}}}\n")
    code, output = cli(["plan", str(pipeline), "--backend", "clore"], capsys)
    assert code in (0, 3), output  # 3: the capped ask fits nothing and explains the closest
    assert_inert(output)


@pytest.mark.slow
def test_clore_api_error_words_are_inert(
    hostile: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fakes.clore_api import Fault

    hostile.fail_next("wallets", Fault(200, {"code": 6, "error": "x\n::error::y ##[z]"}))
    code, output = cli(["doctor", "--gpu", "3090"], capsys)
    assert code == 3, output  # a problem, said in the API's words made inert
    assert "could not read the wallets" in output
    assert _COMMAND.search(output) is None, output


# --- the canary workflow's step summary ---------------------------------------------------------


def test_canary_summary_keeps_doctor_output_inside_one_pre_block(tmp_path: Path) -> None:
    """Whatever doctor prints (an older clore-run, a message not yet escaped) cannot close the
    summary's block or add Markdown: it is escaped text in one <pre>."""
    flow = load_yaml(REPO / "workflows/clore-canary.yml")
    step = next(s for s in flow["jobs"]["canary"]["steps"] if "doctor --canary" in s.get("run", ""))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cli = bin_dir / "clore-run"
    fake_cli.write_text(
        f"#!/bin/sh\nprintf '%s\\n' {_shell_quote(HOSTILE_GPU)} '</pre><img src=x>'\n"
    )
    fake_cli.chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    context = {"secrets": {"CLORE_API_KEY": "k"}, "inputs": {"gpu": "", "currency": ""}}
    done = run_step({**step, "shell": "bash"}, context, env, tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr
    html = MarkdownIt("commonmark").render(summary.read_text(encoding="utf-8"))
    assert html.count("<pre>") == 1 and html.count("</pre>") == 1, html
    assert "<h2>" not in html and "<img" not in html and "<code>" not in html, html
    assert html.rstrip().endswith("</pre>") and "rotate key" in html


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
