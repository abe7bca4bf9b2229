"""summary.json (schema 1), the baseline comparison and summary.md (golden)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner import outcome as outcome_words
from runner.core.model import JobResult, JobStatus, RunRecord, RunStatus
from runner.report import load_summary, read_json, write_reports
from runner.report.compare import BadBaseline, compare, parse_baseline
from runner.report.markdown import cell, render_markdown
from runner.report.summary_model import parse_summary
from tests.report.records import CI_ENV, baseline_summary, mixed_record, write_outputs

ISSUE_3_JOB_FIELDS = {
    "id", "name", "status", "reason", "attempts", "duration_s", "exit_code", "cost_usd", "server",
}  # fmt: skip


@pytest.fixture
def ci_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CI_ENV.items():
        monkeypatch.setenv(name, value)


def _write(tmp_path: Path, baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    write_outputs(tmp_path)
    paths = write_reports(tmp_path, mixed_record(), baseline)
    return read_json(paths.summary_json)  # as a reader of the file gets it


def _job(summary: dict[str, Any], job_id: str) -> dict[str, Any]:
    return next(j for j in summary["jobs"] if j["id"] == job_id)


def test_summary_md_matches_golden(
    tmp_path: Path, ci_env: None, golden: Callable[[str, str], None]
) -> None:
    _write(tmp_path, baseline_summary())
    golden("mixed.summary.md", (tmp_path / "summary.md").read_text(encoding="utf-8"))


def test_summary_md_without_baseline_or_ci(
    tmp_path: Path, golden: Callable[[str, str], None]
) -> None:
    _write(tmp_path)
    golden("mixed-plain.summary.md", (tmp_path / "summary.md").read_text(encoding="utf-8"))


REFERENCE = Path(__file__).parent / "reference"


def _reference_markdown(summary: dict[str, Any]) -> str:
    """summary.md as the jinja2 template it was written from renders it: the Python renderer
    must write the same bytes."""
    import jinja2

    from runner import outcome, untrusted
    from runner.report import markdown as md

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(REFERENCE),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        cell=md.cell, money=md.money, rate=md.rate, duration=md.duration, pct=md.pct,
        icon=md.icon, fence=md.fence, html_text=md.html_text, counted=md.counted,
        look=outcome.outcome, run_line=outcome.run_line, exit_reason=outcome.exit_reason,
        gantt=lambda s: md.summary_gantt(parse_summary(s)),
        remote=lambda value, limit=200: untrusted.markdown(str(value), limit),
    )  # fmt: skip
    env.tests["startswith"] = lambda value, prefix: str(value).startswith(prefix)
    return env.get_template("summary.md.j2").render(s=summary, given_back=outcome.GIVEN_BACK)


def _variants(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary, and versions of it reaching every branch of summary.md."""
    job = summary["jobs"][2]
    many_failed = [dict(job["failed_tests"][0], name=f"t{i}") for i in range(105)]
    with_log = [dict(j, log_tail=j["log_tail"] or ["x"], id=f"{j['id']}{i}") for i, j in
                enumerate(summary["jobs"] * 4)]  # fmt: skip
    changes: list[dict[str, Any]] = [
        {},
        {"jobs": [], "jobs_by_status": {}},
        {"jobs": summary["jobs"][:1], "jobs_by_status": {"passed": 1}},
        {"tests": dict(summary["tests"], total=0)},
        {"tests": dict(summary["tests"], failures=0, errors=0, skipped=0, flaky_jobs=2)},
        {"budget_usd": None, "warnings": ["a | b", "x" * 600]},
        {"warnings": [f"{outcome_words.GIVEN_BACK}RTX 3090 #88028 ($0.0016)", "a | b"]},
        {"jobs": [dict(job, failed_tests=many_failed)]},
        {"jobs": with_log},
        {"ci": {"run_id": "7", "run_url": "https://x/7", "sha": ""}},
        {"ci": None, "comparison": None},
        {"jobs": [dict(j, attempt_details=[], attempts=0) for j in summary["jobs"]]},
        {"hedges": {"boots_given_back": 3, "cost_usd": 0.0123}},
        {"exit_code": None},  # a summary written before it was kept
        {"exit_code": 0, "jobs": [dict(job, allowed_failure=True)]},
        # a failure continue-on-error allows, beside one that fails the run
        {"jobs": [dict(job, allowed_failure=True, id="allowed"), job]},
    ]
    if summary["comparison"]:
        cmp = summary["comparison"]
        changes.append({"comparison": dict(cmp, baseline_run_url=None, jobs=cmp["jobs"][:2])})
    return [{**summary, **change} for change in changes]


@pytest.mark.slow
def test_summary_md_is_what_its_jinja2_template_rendered(tmp_path: Path, ci_env: None) -> None:
    for i, baseline in enumerate((baseline_summary(), None)):
        for n, summary in enumerate(_variants(_write(tmp_path / str(i), baseline))):
            assert render_markdown(parse_summary(summary)) == _reference_markdown(summary), (i, n)


def test_run_fields(tmp_path: Path) -> None:
    s = _write(tmp_path)
    assert s["schema"] == 1
    assert s["status"] == "failed"
    assert (s["started_at"], s["finished_at"]) == (
        "2026-05-28T20:26:40+00:00",
        "2026-05-28T20:38:20+00:00",
    )
    assert s["total_cost_usd"] == pytest.approx(0.2146)
    assert s["budget_usd"] == 2.0 and s["budget_used_pct"] == pytest.approx(10.7)
    assert s["jobs_by_status"] == {
        "passed": 2, "failed": 1, "timed_out": 1, "error": 1, "skipped": 1, "cancelled": 1,
    }  # fmt: skip
    assert s["tests"] == {
        "total": 10, "passed": 3, "failures": 3, "errors": 1, "skipped": 3, "flaky_jobs": 1,
    }  # fmt: skip
    assert s["ci"] is None and s["comparison"] is None
    assert s["hedges"] == {"boots_given_back": 0, "cost_usd": 0.0}


def test_hedged_boots_are_summed_from_the_attempts_facts_and_shown_by_the_cost(
    tmp_path: Path,
) -> None:
    record = mixed_record()
    first = record.results[0]
    hedged = dataclasses.replace(
        first.attempts[-1],
        facts={**first.attempts[-1].facts, "boots_given_back": "2", "hedge_cost_usd": "0.0042"},
    )
    record = dataclasses.replace(
        record,
        results=(dataclasses.replace(first, attempts=(*first.attempts[:-1], hedged)),
                 *record.results[1:]),
    )  # fmt: skip
    write_reports(tmp_path, record)
    s = read_json(tmp_path / "summary.json")
    assert s["hedges"] == {"boots_given_back": 2, "cost_usd": 0.0042}
    assert "(hedged boots: 2 given back, $0.0042)" in render_markdown(parse_summary(s))


def test_job_fields_costs_per_attempt_and_host(tmp_path: Path) -> None:
    s = _write(tmp_path)
    for job in s["jobs"]:
        assert set(job) >= ISSUE_3_JOB_FIELDS
    t = _job(s, "test-4090")
    assert (t["status"], t["attempts"], t["exit_code"], t["server"]) == ("failed", 2, 1, "gpu-a")
    assert t["duration_s"] == 590.0 and t["cost_usd"] == pytest.approx(0.118)
    assert [a["cost_usd"] for a in t["attempt_details"]] == [0.06, 0.058]
    assert t["attempt_details"][0]["usd_per_hour"] == 0.72
    assert t["attempt_details"][0]["facts"]["cost_native"] == "31.5"
    assert t["host"] == {
        "gpu": "RTX 4090", "gpu_count": "2", "driver": "550.54.15", "cuda": "12.4",
        "host_fingerprint": "SHA256:q1w2e3r4t5y6", "server_id": "40123",
    }  # fmt: skip
    assert t["gpu"] == "RTX 4090 x2" and t["usd_per_hour"] == 0.72
    assert t["tests"] == {"total": 4, "failures": 2, "errors": 0, "skipped": 1}
    assert t["location"] == {"file": "ci/gpu.yml", "line": 18, "column": 3}
    assert [(f["name"], f["scope"]) for f in t["failed_tests"]] == [
        ("test_backward", "test"),
        ("test (RTX 4090)", "job"),
    ]
    assert _job(s, "unit")["flaky"] is True
    report = _job(s, "report")  # never ran: what it would have run on is not known
    assert (report["host"], report["gpu"], report["server"], report["usd_per_hour"]) == (
        None,
        None,
        None,
        None,
    )


def test_log_tail_only_for_jobs_that_did_not_pass(tmp_path: Path) -> None:
    s = _write(tmp_path)
    tail = _job(s, "test-4090")["log_tail"]
    assert len(tail) == 30 and tail[-1] == "not a fence end"
    assert "FAILED tests/test_model.py::test_backward | grad" in tail  # ANSI stripped
    assert _job(s, "build")["log_tail"] == []
    assert _job(s, "train")["log_tail"][-1] == "\ufffd\ufffd bad bytes"


def test_secrets_are_redacted_from_log_tails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLORE_API_KEY", "sk-live-123456")
    write_outputs(tmp_path)
    (tmp_path / "logs" / "bench.log").write_text("using key sk-live-123456\n")
    paths = write_reports(tmp_path, mixed_record())
    for path in (paths.summary_json, paths.summary_md, paths.junit):
        assert "sk-live-123456" not in path.read_text(), path.name
    assert "using key ***" in paths.summary_md.read_text()


def test_secrets_are_redacted_from_every_report_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The key can reach a job's JUnit (a test printing its environment), an attempt's message
    # (and so the job's reason) and a long log line, where it must not be cut before redaction.
    key = "sk-live-1234567890abcdef"
    monkeypatch.setenv("CLORE_API_KEY", key)
    write_outputs(tmp_path)
    junit = tmp_path / "artifacts" / "test-4090" / "results.xml"
    junit.write_text(
        junit.read_text()
        .replace("grad is NaN", f"grad is NaN with {key}")
        .replace("loss=nan", f"loss=nan CLORE_API_KEY={key}")
        .replace("test_model.py:42", f"test_model.py:42 ({key})")
        .replace('name="test_backward"', f'name="test_backward[{key}]"')
    )
    (tmp_path / "logs" / "bench.log").write_text("x" * 480 + key + "\n")
    record = mixed_record()
    said = f"upload failed: env has {key}"
    results = tuple(
        dataclasses.replace(
            r,
            reason=said,
            attempts=tuple(dataclasses.replace(a, message=said) for a in r.attempts),
        )
        if r.job_id in ("test-4090", "train")
        else r
        for r in record.results
    )
    paths = write_reports(tmp_path, dataclasses.replace(record, results=results))
    for path in (paths.summary_json, paths.summary_md, paths.junit):
        text = path.read_text()
        assert key[:10] not in text, (path.name, text[text.find(key[:10]) - 200 :][:400])
    assert key[:10] not in json.dumps(paths.read_summary().to_json())  # the end of the run shows
    # A field only the file's redaction catches (a GPU name): the end shows the file's text.
    gpu = dataclasses.replace(record.results[0].attempts[0], facts={"gpu": f"RTX {key}"})
    first = dataclasses.replace(record.results[0], attempts=(gpu,))
    paths = write_reports(tmp_path, dataclasses.replace(record, results=(first,)))
    assert paths.summary is None
    assert _job(paths.read_summary().to_json(), "build")["gpu"] == "RTX ***"


def test_the_summary_kept_is_what_summary_json_reads_back(tmp_path: Path, ci_env: None) -> None:
    """The end of a run shows the summary it kept instead of reading the file back: the same
    value, type for type (a tuple would read back as a list), comparison and warnings included."""
    write_outputs(tmp_path)
    paths = write_reports(tmp_path, mixed_record(), baseline_summary(), notes=("a note",))
    assert paths.summary is not None and paths.summary.comparison is not None
    assert paths.summary == load_summary(paths.summary_json)
    assert json.dumps(paths.summary.to_json()) == json.dumps(read_json(paths.summary_json))


def test_ci_links(tmp_path: Path, ci_env: None) -> None:
    s = _write(tmp_path)
    assert s["ci"]["run_url"] == "https://github.com/octo/gpu-lib/actions/runs/9876543210"
    md = (tmp_path / "summary.md").read_text()
    assert "[CI run 9876543210](https://github.com/octo/gpu-lib/actions/runs/9876543210)" in md


def test_comparison_with_baseline(tmp_path: Path) -> None:
    c = _write(tmp_path, baseline_summary())["comparison"]
    assert c["label"] == "main"
    assert c["total"]["cost_delta_pct"] == pytest.approx(43.1)  # 0.2146 vs 0.15
    assert c["total"]["duration_delta_s"] == -100.0
    jobs = {j["id"]: j for j in c["jobs"]}
    assert set(jobs) == {"build", "test-4090"}
    assert jobs["build"]["cost_delta_pct"] == 0.0
    assert jobs["test-4090"]["cost_delta_usd"] == pytest.approx(0.028)
    assert jobs["test-4090"]["duration_delta_pct"] == pytest.approx(31.1)
    assert "unit" in c["new_jobs"] and c["missing_jobs"] == ["gone"]
    md = (tmp_path / "summary.md").read_text()
    assert "**+43% GPU cost vs main**" in md


def test_comparison_from_zero_cost_has_no_percentage() -> None:
    base = {"schema": 1, "total_cost_usd": 0, "duration_s": 0, "jobs": [{"id": "a"}]}
    cur = {"total_cost_usd": 0.5, "duration_s": 0, "jobs": [{"id": "a", "cost_usd": 0.5}]}
    c = compare(parse_summary(cur), parse_baseline(base)).model_dump()
    assert c["total"]["cost_delta_pct"] is None and c["total"]["duration_delta_pct"] == 0.0
    assert c["label"] == "baseline"


@pytest.mark.parametrize(
    "baseline", [{"schema": 99, "jobs": []}, {"schema": 1, "jobs": "nope"}, {"schema": 1}]
)
def test_unusable_baseline_is_a_warning(tmp_path: Path, baseline: dict[str, Any]) -> None:
    with pytest.raises(BadBaseline):
        compare(parse_summary({"jobs": []}), parse_baseline(baseline))
    s = _write(tmp_path, baseline)
    assert s["comparison"] is None
    assert any(w.startswith("baseline ignored") for w in s["warnings"])


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_a_baseline_do_not_break_the_reports(
    tmp_path: Path, bad: str
) -> None:
    # Python's json reads NaN/Infinity (and 1e999 as inf): a hand-edited or foreign baseline.
    text = json.dumps(baseline_summary()).replace("800.0", bad).replace("0.09", bad)
    s = _write(tmp_path, json.loads(text))
    json.loads((tmp_path / "summary.json").read_text(), parse_constant=_strict)  # valid JSON
    c = s["comparison"]
    assert c["total"]["baseline_duration_s"] == 0.0 and c["total"]["duration_delta_pct"] is None
    test_4090 = next(j for j in c["jobs"] if j["id"] == "test-4090")
    assert test_4090["cost_delta_pct"] is None
    assert "GPU cost vs main" in (tmp_path / "summary.md").read_text()


def _strict(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def test_table_cells_cannot_break_the_table(tmp_path: Path) -> None:
    record = mixed_record()
    evil = JobResult("build", JobStatus.FAILED, "line one\nline | two <details>")
    record = RunRecord(
        record.pipeline,
        (evil, *record.results[1:]),
        RunStatus.FAILED,
        record.started_at,
        record.finished_at,
    )
    write_outputs(tmp_path)
    md = write_reports(tmp_path, record).summary_md.read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 7  # header and one row per job: the newline did not split a row
    widths = {len(line.replace("\\|", "").split("|")) for line in rows}
    assert len(widths) == 1  # every row has as many cells as the header
    assert "line one line \\| two &lt;details\\>" in md


def test_names_in_the_html_summary_line_are_not_markdown_escaped(tmp_path: Path) -> None:
    # `<summary>` is HTML, where a Markdown `\\|` escape shows as a literal backslash.
    s = _write(tmp_path)
    job = _job(s, "test-4090")
    job["name"] = "test | fp8 <x> & co"
    md = render_markdown(parse_summary(s))
    assert "<summary>test | fp8 &lt;x&gt; &amp; co: last 30 lines of logs/test-4090.log" in md
    assert "| test \\| fp8 &lt;x> &amp; co |" in md  # the table row keeps its Markdown escapes


def test_cell_filter() -> None:
    assert cell("a|b\nc\r\nd") == "a\\|b c d"
    assert cell("x" * 300) == "x" * 199 + "…"
    assert cell("<b>") == "&lt;b>"


def test_log_with_backticks_cannot_close_its_fence(tmp_path: Path) -> None:
    s = _write(tmp_path)
    md = render_markdown(parse_summary(s))
    block = md.split("logs/test-4090.log</summary>\n\n", 1)[1]
    fence = block.split("text\n", 1)[0]
    assert fence == "````"  # longer than the ``` inside the log
    assert block.count(fence + "\n") == 1 and block.count(fence + "text") == 1


def test_reports_are_replaced_atomically(tmp_path: Path) -> None:
    write_outputs(tmp_path)
    (tmp_path / "summary.json").write_text("stale")
    write_reports(tmp_path, mixed_record())
    write_reports(tmp_path, mixed_record())
    assert json.loads((tmp_path / "summary.json").read_text())["schema"] == 1
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_failed_write_keeps_the_old_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_outputs(tmp_path)
    write_reports(tmp_path, mixed_record())
    before = (tmp_path / "junit.xml").read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("runner.report.os.replace", broken_replace)
    with pytest.raises(OSError):
        write_reports(tmp_path, mixed_record())
    assert (tmp_path / "junit.xml").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_interrupted_run_with_no_results_still_reports(tmp_path: Path) -> None:
    record = mixed_record()
    record = RunRecord(
        record.pipeline, (), RunStatus.INTERRUPTED, record.started_at, record.started_at + 3
    )
    paths = write_reports(tmp_path, record)
    s = read_json(paths.summary_json)
    assert s["status"] == "interrupted" and s["jobs"] == [] and s["tests"]["total"] == 0
    assert "interrupted" in paths.summary_md.read_text()


def test_long_failure_lists_are_capped(tmp_path: Path) -> None:
    s = _write(tmp_path)
    job = _job(s, "test-4090")
    test = job["failed_tests"][0]
    s["jobs"] = [
        {**job, "id": f"j{i}", "failed_tests": [test] * 5, "log_tail": ["x"]} for i in range(30)
    ]
    md = render_markdown(parse_summary(s))
    assert md.count(r"tests\.test\_model\.test\_backward") == 100
    assert "… and 50 more in junit.xml" in md
    assert md.count("<details>") == 20 and "the logs of 10 more failed jobs" in md


def test_a_secret_given_with_surrounding_whitespace_is_still_redacted() -> None:
    # A secret pasted with a trailing newline: clore-run itself uses the stripped key.
    from runner.report.text import redact

    env = {"CLORE_API_KEY": "  sk-live-123456\n"}
    assert redact("auth failed for sk-live-123456.", env) == "auth failed for ***."


def test_server_text_in_the_summary_makes_no_image_link_or_mention(tmp_path: Path) -> None:
    record = mixed_record()
    evil = "![x](https://evil.example/a.png) [click](http://e.example) @octocat <img src=x>"
    bad = JobResult("build", JobStatus.FAILED, evil)
    record = RunRecord(
        record.pipeline,
        (bad, *record.results[1:]),
        RunStatus.FAILED,
        record.started_at,
        record.finished_at,
    )
    write_outputs(tmp_path)
    md = write_reports(tmp_path, record).summary_md.read_text()
    assert "![" not in md and "](http" not in md and "<img" not in md
    assert "@octocat" not in md and "https://evil" not in md


def test_summary_json_has_a_field_per_line_and_a_job_per_line(tmp_path: Path) -> None:
    """Laid out for grep and a person, and the same JSON as an indented dump."""
    from runner.report import dump_summary

    summary = _write(tmp_path, baseline_summary())
    text = (tmp_path / "summary.json").read_text(encoding="utf-8")
    assert json.loads(text) == summary
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and lines[1] == '  "schema": 1,'
    job_lines = [line for line in lines if line.startswith('    {"id": ')]
    assert [json.loads(line.rstrip(","))["id"] for line in job_lines] == [
        j["id"] for j in summary["jobs"]
    ]
    assert len(lines) == len(summary) + 2 + len(summary["jobs"]) + 1  # + {, }, and ] of jobs
    assert dump_summary({}) == b"{}\n"
    assert json.loads(dump_summary({**summary, "jobs": []})) == {**summary, "jobs": []}


def test_a_warm_server_and_the_wait_for_one_are_read_from_serves_facts(tmp_path: Path) -> None:
    record = mixed_record()
    first, second = record.results[0], record.results[1]
    warm = dataclasses.replace(
        first.attempts[-1],
        facts={**first.attempts[-1].facts, "warm_server": "true", "server_wait_s": "0.25"},
    )
    cold = tuple(
        dataclasses.replace(a, placed_at=a.started_at + 30.0, facts={}) for a in second.attempts
    )
    record = dataclasses.replace(
        record,
        results=(dataclasses.replace(first, attempts=(*first.attempts[:-1], warm)),
                 dataclasses.replace(second, attempts=cold), *record.results[2:]),
    )  # fmt: skip
    write_reports(tmp_path, record)
    s = read_json(tmp_path / "summary.json")
    one, two = s["jobs"][0], s["jobs"][1]
    assert (one["warm_server"], one["server_wait_s"]) == (True, 0.25)
    # run's own jobs: no warm server, the wait is their time getting a place
    assert (two["warm_server"], two["server_wait_s"]) == (False, 30.0 * len(cold))
    old = {k: v for k, v in two.items() if k not in ("warm_server", "server_wait_s")}
    read = parse_summary({**s, "jobs": [old]}).jobs[0]  # a file from before the fields
    assert (read.warm_server, read.server_wait_s) == (False, 0.0)
