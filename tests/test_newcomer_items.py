"""The small things a newcomer met in a first hour with clore-run, each held to its fix."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import tomllib

from runner.core.model import JobResult, JobStatus, RunRecord, RunStatus
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline

ROOT = Path(__file__).resolve().parents[1]


def test_the_test_extra_lists_each_package_once() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = [re.split(r"[<>=\[; ]", req, maxsplit=1)[0].lower() for req in extra["test"]]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_docs_install_extras_from_a_checkout_not_a_package_index() -> None:
    """clore-run is on no package index: `pip install 'clore-run[serve]'` works only where it
    is installed already; from a checkout it is `pip install '.[serve]'`."""
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "runner").rglob("*.py")]
    for path in texts:
        assert "install 'clore-run[" not in path.read_text(encoding="utf-8"), path
    assert "pip install '.[serve]'" in (ROOT / "docs/serve.md").read_text()


def test_offers_names_the_country_column_so_norway_does_not_read_no() -> None:
    from runner.cli.offers import render_table

    header = render_table([]).split()
    assert header[-1] == "COUNTRY" and "LOC" not in header


def test_plan_on_a_pipeline_that_rents_nothing_says_nothing_of_renting() -> None:
    from runner.plan import build_plan, render_plan

    local = parse_pipeline("jobs:\n  a: {run: x}\n", "p.yml", {})
    assert "provision" not in render_plan(build_plan(local))
    gpu = parse_pipeline("jobs:\n  a: {run: x, gpu: {type: '4090'}}\n", "p.yml", {})
    assert "\nprovision: ahead (" in render_plan(build_plan(gpu))


def test_a_cancelled_job_does_not_warn_its_junit_file_is_missing(tmp_path: Path) -> None:
    from runner.report.junit import build_junit

    pipeline = parse_pipeline(
        "jobs:\n  a: {run: x, junit: r.xml}\n  b: {run: x, junit: r.xml}\n", "p.yml", {}
    )
    results = (
        JobResult("a", JobStatus.CANCELLED, "run cancelled"),
        JobResult("b", JobStatus.FAILED, "exit code 1"),
    )
    record = RunRecord(pipeline, results, RunStatus.FAILED, 0.0, 1.0, "local", "r")
    warnings = build_junit(tmp_path, record).warnings
    assert warnings == ("job 'b' (r.xml): JUnit file not found",)  # the one that ran says so


def test_help_keeps_no_hard_line_break_of_a_docstring() -> None:
    from runner.cli.help_words import unwrapped

    doc = """List the offers that fit, cheapest first;
        hosts that failed lately are skipped.

        Second paragraph
        on two lines."""
    assert unwrapped(doc) == (
        "List the offers that fit, cheapest first; hosts that failed lately are skipped.\n\n"
        "Second paragraph on two lines."
    )


def test_the_help_lists_each_command_on_whole_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from runner.cli import main

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "200")
        with pytest.raises(SystemExit):
            main(["--help"])
    out = capsys.readouterr().out
    offers = next(line for line in out.splitlines() if "│ offers " in line)
    assert "are skipped, and said so." in offers  # one line at 200 columns, not cut at "hosts"


def test_doctor_says_each_check_as_it_passes() -> None:
    """The checks read the API for seconds: each line is said before the next read begins."""
    from runner.backends.clore import doctor
    from runner.core.model import GpuAsk

    said: list[str] = []

    class Client:
        def wallets(self) -> list[object]:
            return []

        def renter_fees(self) -> object:
            assert said == ["key: accepted by the Clore API"], said  # already printed
            raise doctor.e.DatabaseError("Clore API (reading your fees): database error")

        def marketplace(self) -> object:
            assert any(line.startswith("fees: ") for line in said), said  # already printed
            raise doctor.e.DatabaseError("Clore API (listing the market): database error")

    found = doctor.check_account(Client(), "USD-Blockchain", GpuAsk(), said.append)  # type: ignore[arg-type]
    assert found.lines == said and found.problems


def _workspace_pipeline(tmp_path: Path, jobs: int) -> object:
    text = "jobs:\n" + "".join(f"  j{i}: {{run: echo hi}}\n" for i in range(jobs))
    path = tmp_path / "p.yml"
    path.write_text(text)
    return parse_pipeline(text, str(path), {})


def test_a_second_run_with_another_out_outside_git_is_not_refused(tmp_path: Path) -> None:
    """The first run's results folder (its lock file says it is ours) is not the workspace."""
    from runner.engine.run_command import LOCK_NAME, _workspace

    pipeline = _workspace_pipeline(tmp_path, 2)
    first = tmp_path / "clore-run-results"
    (first / "logs").mkdir(parents=True)
    (first / LOCK_NAME).write_text("")
    (first / "logs" / "j0.log").write_text("hi\n")
    (first / "summary.json").write_text("{}")
    workspace = _workspace(pipeline, tmp_path, tmp_path / "other")  # type: ignore[arg-type]
    assert workspace.files == ("p.yml",)


def test_the_refusal_of_an_untracked_folder_is_said_once(tmp_path: Path) -> None:
    from runner.engine.run_command import _workspace

    pipeline = _workspace_pipeline(tmp_path, 6)
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(SpecError) as caught:
        _workspace(pipeline, tmp_path, tmp_path / "out")  # type: ignore[arg-type]
    (said,) = str(caught.value).splitlines()
    assert said.startswith(f"{tmp_path / 'p.yml'}:2:3: jobs.j0.workspace: {tmp_path} is not in")
    assert "(and of jobs j1, j2, j3, j4, j5)" in said


@pytest.mark.slow
def test_logs_follow_on_a_job_that_is_skipped_says_how_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.cli import main
    from tests.serve.harness import FINAL, TOKEN, thread_server

    pipeline = tmp_path / "p.yml"
    pipeline.write_text(
        textwrap.dedent("""\
        jobs:
          a: {run: exit 1}
          b: {needs: a, run: echo never}
        """)
    )
    monkeypatch.setenv("CLORE_RUN_TOKEN", TOKEN)
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        with pytest.raises(SystemExit):
            main(["submit", str(pipeline), "--server", url])
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main(["logs", "s1.b", "-f", "--server", url])
        assert srv.api.wait_status("s1.b", FINAL)["status"] == "skipped"
    out, err = capsys.readouterr()
    assert info.value.code == 1  # it did not pass, as `run` would say of it
    assert err == "clore-run: s1.b: skipped: needs 's1.a', which failed\n", (out, err)
