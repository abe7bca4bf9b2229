"""One run with every kind of outcome, through every writer: each says a job's end in the same
words, with the same colour or mark, and counts them alike (runner.outcome is the one place)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner import outcome as O
from runner.backends.base import NO_STAGES, RunOutcome
from runner.core.model import Attempt, FailureKind, JobResult, JobStatus, RunRecord
from runner.errors import JobCannotRun
from runner.report import write_reports
from runner.report.comment import comment_body
from runner.report.markdown import render_markdown
from runner.report.mermaid import gantt
from runner.report.summary_model import Summary, parse_summary
from runner.report.timeline import build_timeline, records_from_summary
from tests.fakes.passing_backend import PassingBackend
from tests.report.records import T0, _job, mixed_record, write_outputs

# job id -> the outcome it must read as everywhere: every status, each qualifier.
EXPECTED = {
    "build": O.Outcome("passed"),
    "unit": O.Outcome("passed", flaky=True),
    "test-4090": O.Outcome("failed"),
    "bench": O.Outcome("timed_out"),
    "train": O.Outcome("error"),
    "report": O.Outcome("skipped"),
    "docs": O.Outcome("cancelled"),
    "lint": O.Outcome("failed", allowed=True),
    "soak": O.Outcome("timed_out", allowed=True),
}
NAMES = {"lint": "lint", "soak": "soak"}


def _every_outcome() -> RunRecord:
    """mixed_record (passed, flaky, failed, timed out, error, skipped, cancelled) and two jobs
    continue-on-error lets fail: one failed, one timed out (SIGTERM's -15 as its exit)."""
    record = mixed_record()
    lint = dataclasses.replace(_job("lint", "lint", 45), continue_on_error=True)
    soak = dataclasses.replace(_job("soak", "soak", 50), continue_on_error=True)

    def attempt(failure: FailureKind, code: int | None, message: str) -> Attempt:
        return Attempt(1, T0 + 10, T0 + 40, code, failure, message, "gpu-z", 0.001, {}, T0 + 12)

    results = (
        *record.results,
        JobResult(
            "lint",
            JobStatus.FAILED,
            "exit code 1",
            attempts=(attempt(FailureKind.TEST_FAILURE, 1, "exit code 1"),),
        ),
        JobResult(
            "soak",
            JobStatus.TIMED_OUT,
            "timed out after 30 s",
            attempts=(attempt(FailureKind.TIMEOUT, None, "timed out after 30 s"),),
        ),
    )
    pipeline = dataclasses.replace(record.pipeline, jobs=(*record.pipeline.jobs, lint, soak))
    return dataclasses.replace(record, pipeline=pipeline, results=results)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    out = tmp_path_factory.mktemp("out")
    write_outputs(out)
    write_reports(out, _every_outcome())
    return out, parse_summary(json.loads((out / "summary.json").read_text()))


def test_the_summary_knows_every_outcome(reports: tuple[Path, Summary]) -> None:
    _, summary = reports
    seen = {
        j.id: O.outcome(j.status, allowed=j.allowed_failure, flaky=j.flaky) for j in summary.jobs
    }
    assert seen == EXPECTED
    assert {o.tone for o in EXPECTED.values()} == set(O.HEX_COLOURS)  # every look is used


def _md_rows(markdown: str, summary: Summary) -> dict[str, str]:
    """The jobs table's status cells, by job (the rows are in the summary's order)."""
    lines = markdown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| Job |")) + 2
    table = lines[first : first + len(summary.jobs)]
    return {job.id: row.split(" | ")[1] for job, row in zip(summary.jobs, table, strict=True)}


def test_summary_md_and_the_pr_comment_give_each_job_its_mark_and_words(
    reports: tuple[Path, Summary],
) -> None:
    out, summary = reports
    markdown = (out / "summary.md").read_text()
    comment = comment_body(render_markdown(summary), "gpu", None)
    for text in (markdown, comment):
        rows = _md_rows(text, summary)
        assert rows == {i: f"{o.mark} {o.words}" for i, o in EXPECTED.items()}
    assert "🟡" not in markdown.split("\n", 1)[0]  # the headline's mark is the run's
    assert markdown.startswith("## ❌ gpu-tests: failed (2 allowed failures)\n")


def test_junit_says_the_same_words(reports: tuple[Path, Summary]) -> None:
    out, _ = reports
    root = ET.parse(out / "junit.xml").getroot()
    said = {}
    for suite in root.iter("testsuite"):
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        if "clore.job_id" in props:
            said[props["clore.job_id"]] = props["clore.status"]
    assert said == {i: o.words for i, o in EXPECTED.items()}


def test_the_final_table_on_screen_says_and_colours_alike(reports: tuple[Path, Summary]) -> None:
    from runner.live.final import table_cells, totals_parts

    _, summary = reports
    columns, rows = table_cells(summary)
    status = [c.header for c in columns].index("status")
    on_screen = {job.id: row[status] for job, row in zip(summary.jobs, rows, strict=True)}
    assert on_screen == {i: (o.words, o.style) for i, o in EXPECTED.items()}
    total = "".join(text for text, _ in totals_parts(summary))
    counts = re.search(r": (.*?) ·", total)
    assert counts is not None
    headline = (Path(reports[0]) / "summary.md").read_text().splitlines()[2]
    assert headline == f"**9 jobs**: {counts.group(1)}"  # the same counts, the same words


def test_the_live_lines_say_the_same_words() -> None:
    from runner.engine.console import Console

    record = _every_outcome()
    jobs = {j.id: j for j in record.pipeline.jobs}
    stream = io.StringIO()
    console = Console(stream, live=False, jobs=tuple(jobs.values()), tick_s=0, heartbeat_s=0)
    for result in record.results:
        console.job_done(jobs[result.job_id], result)
    lines = dict(re.findall(r"^\[([\w-]+)\] (.*)$", stream.getvalue(), re.M))
    for job_id, expected in EXPECTED.items():
        line = lines[job_id]  # `timed out after 30 s (allowed)`: the reason sits inside
        assert line.startswith(O.status_words(expected.status)), (job_id, line)
        assert (O.ALLOWED in line, O.FLAKY in line) == (expected.allowed, expected.flaky), line
    assert "-15" not in stream.getvalue()


def test_the_timeline_draws_each_end_in_its_colour(reports: tuple[Path, Summary]) -> None:
    out, summary = reports
    root = ET.fromstring((out / "timeline.svg").read_text())
    ns = "{http://www.w3.org/2000/svg}"
    last: dict[str, tuple[str, str]] = {}
    names = {j.name: j.id for j in summary.jobs}
    for rect in root.iter(f"{ns}rect"):
        title = rect.find(f"{ns}title")
        if title is None or "running" not in (title.text or ""):
            continue
        label = (title.text or "").split(":")[0]
        job_id = names[max((n for n in names if label.startswith(n)), key=len)]
        last[job_id] = (rect.get("fill", ""), label)  # the last run bar: the job's end
    for job_id, expected in EXPECTED.items():
        if job_id in ("report", "docs"):  # never ran: no bar
            continue
        fill, label = last[job_id]
        assert fill == expected.colour, (job_id, label)
        if expected.status != "passed":
            assert O.status_words(expected.status).replace("error", "server lost") in label
            assert ("allowed" in label) == expected.allowed
    legend = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert "timed out" in legend and "failed (allowed)" in legend


def test_the_mermaid_chart_marks_an_allowed_failure_apart(reports: tuple[Path, Summary]) -> None:
    _, summary = reports
    chart = gantt(build_timeline(records_from_summary(summary)))
    tasks = [line.strip().split(" :") for line in chart.splitlines() if " :" in line]
    lines = {label: tags for label, tags in tasks}
    assert lines["lint (failed, allowed)"].startswith("active, ")
    assert lines["soak (timed out, allowed)"].startswith("active, ")
    assert lines["bench (timed out)"].startswith("crit, ")
    assert lines["test (RTX 4090) attempt 2 (failed)"].startswith("crit, ")


def test_a_timeout_is_never_a_signal_number(reports: tuple[Path, Summary]) -> None:
    _, summary = reports
    for job in summary.jobs:
        if job.status == "timed_out":
            assert job.exit_code is None
            assert all(a.exit_code is None for a in job.attempt_details)


def test_the_dashboard_and_jobs_command_say_and_colour_alike() -> None:
    from runner.cli.serve import status_word
    from runner.serve.dashboard.reads import JobLine, QueuePage
    from runner.serve.dashboard.render import Renderer
    from runner.serve.views import look
    from runner.stores.queue import JobMatch, JobRow

    css = (Path(__file__).parents[2] / "runner/serve/dashboard/static/style.css").read_text()
    lines = []
    for n, (job_id, expected) in enumerate(EXPECTED.items()):
        spec = {"continue_on_error": expected.allowed}
        attempts = 2 if expected.flaky else 1
        seen = look(expected.status, spec, attempts)
        assert seen == expected
        assert f".{seen.css} " in css  # the tone has its colour on the page
        row = JobRow(
            n, job_id, 1, job_id, expected.status, "normal", 0.0, None, None, "", attempts,
            0.0, 0, 0, None, expected.allowed,
        )  # fmt: skip
        lines.append(JobLine(row, None, None, "", None, 0.0, seen.words, seen.css))
        reply = {"status": expected.status, "allowed_failure": expected.allowed}
        assert status_word({**reply, "attempts": attempts}) == expected.words
    counts = {"timed_out": 2}
    page = QueuePage(JobMatch(), lines, counts, len(lines), None, None)
    html = Renderer().fragment("queue_rows.j2", data=page, limit=50)
    for job_id, expected in EXPECTED.items():
        cell = re.search(rf'id="job-{job_id}".*?<span class="([^"]*)">([^<]*)</span>', html, re.S)
        assert cell is not None
        assert cell.group(2) == expected.words
        assert cell.group(1).split()[-1] == expected.css
    assert "timed_out <b>" not in html and "timed out <b>2</b>" in html


def test_a_job_that_billed_nothing_has_no_rate_on_the_dashboard() -> None:
    from runner.serve.dashboard.reads import usd_per_hour

    local = {"started_at": 0.0, "finished_at": 30.0, "cost_usd": 0.0, "facts": {}}
    assert usd_per_hour(local) is None  # `—`, as for one that took under a second
    billed = {**local, "cost_usd": 0.01}
    assert usd_per_hour(billed) == pytest.approx(1.2)


def test_follow_is_ticked_only_while_the_job_can_still_write() -> None:
    template = Path(__file__).parents[2] / "runner/serve/dashboard/templates/job.j2"
    box = re.search(r'<input type="checkbox" id="log-follow"[^>]*>', template.read_text())
    assert box is not None and box.group() == (
        '<input type="checkbox" id="log-follow"{% if not data.final %} checked{% endif %}>'
    )


class _EndsByName(PassingBackend):
    """A job's attempt ends as its name says: `fail` exits 1, `infra` finds no place (exit 3),
    `stop` gets the run a SIGINT (exit 130); any other passes."""

    name = "ends"

    def place(self, server, job, cancel, stages=NO_STAGES):  # type: ignore[no-untyped-def]
        if job.id.startswith("infra"):
            raise JobCannotRun("no place fits it")
        return super().place(server, job, cancel, stages)

    def run(self, place, request, sink, cancel, stages=NO_STAGES):  # type: ignore[no-untyped-def]
        if request.job.id.startswith("fail"):
            return RunOutcome(1, FailureKind.TEST_FAILURE, "exit code 1")
        if request.job.id.startswith("stop"):
            os.kill(os.getpid(), signal.SIGINT)
            assert cancel.wait(10), "the run never stopped the job"
            return RunOutcome(None, FailureKind.CANCELLED, "interrupted")
        return super().run(place, request, sink, cancel, stages)


# (jobs, the exit code, failures continue-on-error allows)
RUN_ENDS = {
    "passed": ("ok", 0, 0),
    "passed, a failure allowed": ("ok fail-allowed", 0, 1),
    "failed": ("ok fail", 1, 0),
    "errored": ("infra", 3, 0),
    "interrupted": ("stop", 130, 0),
}


@pytest.mark.parametrize("end", list(RUN_ENDS))
def test_every_writer_says_why_the_run_exits_alike(
    end: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's last line, summary.json's code, summary.md, the step summary and the PR
    comment give the same exit code and reason (runner.outcome's), and the console's totals
    and summary.md's headline the same run word."""
    from runner.engine.run_command import RunOptions, execute
    from runner.spec.loader import parse_pipeline

    ids, expected, allowed = RUN_ENDS[end]
    lines = [f"  {i}: {{run: 'true', workspace: false}}" for i in ids.split()]
    lines = [line.replace("}", ", continue-on-error: true}") if "allowed" in line else line
             for line in lines]  # fmt: skip
    pipeline = parse_pipeline("jobs:\n" + "\n".join(lines) + "\n", "p.yml", {})
    step_summary = tmp_path / "step-summary.md"
    for name, value in {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary),
                        "GITHUB_OUTPUT": str(tmp_path / "output")}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    screen = io.StringIO()
    out = tmp_path / "out"
    _, code = execute(pipeline, _EndsByName(), RunOptions(out_dir=out), screen)
    assert code == expected
    summary = parse_summary(json.loads((out / "summary.json").read_text()))
    assert summary.exit_code == code
    said = O.exit_line(code, allowed)
    assert said.startswith(f"exit {code}: ")
    # On screen: the last line (in the message shape when the run did not pass, its hint
    # under it), and the totals beginning with the run's word.
    shown = screen.getvalue().rstrip("\n").split("\n")
    ending = shown[-2:] if shown[-1].startswith("hint: ") else shown[-1:]
    assert ending[0] == (said if code == 0 else f"clore-run: {said}")
    word = O.run_line(summary.status, allowed)
    assert any(line.startswith(f"{word}: ") for line in shown), shown
    markdown = (out / "summary.md").read_text()
    in_markdown = f" · **exit {code}**: {O.exit_reason(code, allowed)}\n"
    assert markdown.splitlines()[0].endswith(f": {word}")
    for text in (markdown, step_summary.read_text(), comment_body(markdown, "gpu", None)):
        assert in_markdown in text
        assert text.count("**exit ") == 1


def test_a_runs_word_is_a_participle_for_every_status() -> None:
    """`errored: 1 errored`, never `error: ...`, which reads as a message of another shape."""
    from runner.core.model import RunStatus

    assert set(O.RUN_WORDS) == {s.value for s in RunStatus} == set(O.RUN_EXIT_CODES)
    assert all(word.endswith("ed") for word in O.RUN_WORDS.values())
    assert O.run_line("error") == "errored"


def test_the_exit_reasons_are_one_table() -> None:
    """`--help`, summary.json's schema and the run's end read the same table."""
    from runner.report.summary_model import Summary

    listed = O.exit_codes_help()
    assert all(f"{code} {reason}" in listed for code, reason in O.EXIT_REASONS.items())
    described = Summary.model_fields["exit_code"].description or ""
    assert listed in described
    repo = Path(__file__).parents[2]
    for doc in ("README.md", "docs/cli.md"):
        text = " ".join((repo / doc).read_text().split())
        assert all(reason in text for reason in O.EXIT_REASONS.values()), doc
