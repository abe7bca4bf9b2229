"""Workflow commands and environment files, read back the way the Actions runner reads them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from runner.report import write_reports
from runner.report.github_actions import (
    STEP_SUMMARY_LIMIT,
    add_mask,
    annotate_failures,
    append_step_summary,
    command,
    escape_data,
    escape_property,
    mask_secrets,
    print_log_group,
    publish,
    write_outputs,
)
from runner.report.summary_model import parse_summary
from tests.report.records import mixed_record
from tests.report.records import write_outputs as write_run_outputs


def parse_env_file(text: str) -> dict[str, str]:
    """The runner's reading of GITHUB_OUTPUT: `k=v` lines, or `k<<DELIM` ... a line `DELIM`."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body: list[str] = []
            while lines[i] != delimiter:  # IndexError: an unterminated block, as the runner fails
                body.append(lines[i])
                i += 1
            i += 1
            values[name] = "\n".join(body)
        else:
            name, value = line.split("=", 1)
            values[name] = value
    return values


def test_escaping() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert command("error", "x\ny", file="ci/p.yml", line=3, title="t: a, b", col=None) == (
        "::error file=ci/p.yml,line=3,title=t%3A a%2C b::x%0Ay"
    )


def test_outputs_survive_values_that_look_like_delimiters(tmp_path: Path) -> None:
    out = tmp_path / "output"
    out.write_text("earlier=1\n")  # other steps' lines stay intact
    tricky = "line one\nEOF\nghadelimiter_\nname=value\n<<x"
    write_outputs(out, {"status": "failed", "multi": tricky, "empty": ""})
    assert parse_env_file(out.read_text()) == {
        "earlier": "1",
        "status": "failed",
        "multi": tricky,
        "empty": "",
    }


def test_publish_outputs_summary_and_annotations(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    write_run_outputs(out_dir)
    paths = write_reports(out_dir, mixed_record())
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "GITHUB_WORKSPACE": str(tmp_path),
    }
    stdout = io.StringIO()
    publish(paths, env, stdout)
    outputs = parse_env_file((tmp_path / "output").read_text())
    assert outputs == {
        "status": "failed",
        "total-cost-usd": "0.2146",
        "junit-path": str(paths.junit),
        "summary-path": str(paths.summary_json),
        "summary-md-path": str(paths.summary_md),
    }
    assert (tmp_path / "summary").read_text() == paths.summary_md.read_text()
    errors = [line for line in stdout.getvalue().splitlines() if line.startswith("::error ")]
    assert [e.split("::")[1].split(",")[:2] for e in errors] == [
        ["error file=ci/gpu.yml", "line=18"],  # test-4090
        ["error file=ci/gpu.yml", "line=25"],  # bench (timed out)
        ["error file=ci/gpu.yml", "line=30"],  # train (infrastructure)
    ]
    assert "failed tests: test_backward" in errors[0].replace("%0A", "\n")


def test_publish_does_nothing_outside_actions(tmp_path: Path) -> None:
    write_run_outputs(tmp_path)
    paths = write_reports(tmp_path, mixed_record())
    stdout = io.StringIO()
    env = {"GITHUB_OUTPUT": str(tmp_path / "output")}
    publish(paths, env, stdout)
    assert stdout.getvalue() == "" and not (tmp_path / "output").exists()


def test_annotations_stay_within_the_per_step_limit() -> None:
    jobs = [
        {"id": f"j{i}", "name": f"j{i}", "status": "failed",
         "location": {"file": "/ws/ci/p.yml", "line": i}}
        for i in range(1, 16)
    ]  # fmt: skip
    summary = parse_summary({"pipeline": {"source": "/ws/ci/p.yml"}, "jobs": jobs})
    stdout = io.StringIO()
    assert annotate_failures(summary, stdout, workspace="/ws") == 10
    lines = stdout.getvalue().splitlines()
    assert len(lines) == 10 and all(line.startswith("::error file=ci/p.yml") for line in lines)
    assert lines[-1].endswith("::6 more failed jobs; see the job summary")


def test_annotation_of_a_pipeline_given_from_a_subdirectory_points_into_the_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `cd gpu && clore-run run pipeline.yml`: the file is gpu/pipeline.yml in the repository.
    (tmp_path / "gpu").mkdir()
    monkeypatch.chdir(tmp_path / "gpu")
    jobs = [
        {"id": "j", "name": "j", "status": "failed",
         "location": {"file": "pipeline.yml", "line": 4}}
    ]  # fmt: skip
    summary = parse_summary({"pipeline": {"source": "pipeline.yml"}, "jobs": jobs})
    stdout = io.StringIO()
    annotate_failures(summary, stdout, workspace=str(tmp_path))
    assert stdout.getvalue().startswith("::error file=gpu/pipeline.yml,line=4")


def test_step_summary_cut_cleanly_under_one_mib(tmp_path: Path) -> None:
    target = tmp_path / "summary"
    target.write_text("# from an earlier command in this step\n" * 1000)
    log = "\n".join(f"log line {i} " + "é" * 50 for i in range(30_000))
    markdown = f"## title\n\n<details><summary>log</summary>\n\n```text\n{log}\n```\n\n</details>\n"
    assert append_step_summary(target, markdown) is True
    data = target.read_bytes()
    assert len(data) < STEP_SUMMARY_LIMIT
    text = data.decode("utf-8")  # never cut inside a UTF-8 sequence
    added = text.split("# from an earlier command in this step\n")[-1]
    assert added.count("```") == 2 and added.count("<details>") == added.count("</details>") == 1
    assert added.endswith("the full summary.md is in the output._\n")


def test_small_step_summary_is_appended_whole(tmp_path: Path) -> None:
    target = tmp_path / "summary"
    assert append_step_summary(target, "## ok\n") is False
    assert append_step_summary(target, "## again") is False
    assert target.read_text() == "## ok\n## again\n"


def test_log_group_switches_commands_off_for_the_log(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("hello\n::add-mask::secret\n::error::forged\n")
    stdout = io.StringIO()
    print_log_group("job build", log, stdout)
    lines = stdout.getvalue().splitlines()
    assert lines[0] == "::group::job build" and lines[-1] == "::endgroup::"
    stop = lines[1]
    assert stop.startswith("::stop-commands::")
    token = stop.removeprefix("::stop-commands::")
    assert len(token) > 20 and lines[-2] == f"::{token}::"
    assert lines[2:5] == ["hello", "::add-mask::secret", "::error::forged"]


def test_masks_only_in_actions_and_line_by_line() -> None:
    stdout = io.StringIO()
    mask_secrets({"CLORE_API_KEY": "k1"}, stdout)
    assert stdout.getvalue() == ""
    mask_secrets({"GITHUB_ACTIONS": "true", "CLORE_API_KEY": "abc%def"}, stdout)
    assert stdout.getvalue() == "::add-mask::abc%25def\n"
    stdout = io.StringIO()
    add_mask("line1\nline2", stdout)
    assert set(stdout.getvalue().splitlines()) == {
        "::add-mask::line1%0Aline2",
        "::add-mask::line1",
        "::add-mask::line2",
    }


@pytest.mark.parametrize("value", ["a\nb", "x" * 10])
def test_outputs_json_round_trip(tmp_path: Path, value: str) -> None:
    out = tmp_path / "output"
    write_outputs(out, {"v": json.dumps(value)})
    assert json.loads(parse_env_file(out.read_text())["v"]) == value


def test_run_warnings_become_annotations_with_no_command_inside() -> None:
    from runner.report.github_actions import annotate_run_warnings

    out = io.StringIO()
    given_back = "rented and given back: RTX 3090 #88028 ($0.0016)"  # no warning: a fact
    annotate_run_warnings(["1 rental(s) not confirmed released\n::error::fake", given_back], out)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("::warning title=clore-run::1 rental(s) not confirmed released%0A")
    assert "\n::error::" not in out.getvalue()


def test_log_group_says_earlier_lines_only_when_some_were_left_out(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    # Colour codes, a `\r` redraw and a multi-byte character: the lines shown are shorter
    # than the file, yet none was left out.
    log.write_bytes("\x1b[32mok\x1b[0m\n 50%\r100%\nété\n".encode())
    whole = io.StringIO()
    print_log_group("job", log, whole, max_lines=10)
    assert "earlier lines" not in whole.getvalue()
    cut = io.StringIO()
    print_log_group("job", log, cut, max_lines=2)
    assert f"... (earlier lines in {log})" in cut.getvalue()
