"""The run's pictures: the timeline model, its Mermaid gantt chart and timeline.svg."""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner.report import write_reports
from runner.report.mermaid import MAX_TASKS, gantt
from runner.report.summary_model import parse_summary
from runner.report.timeline import AttemptRecord, build_timeline, records_from_summary
from runner.report.timeline_svg import render_svg
from tests.report.records import mixed_record

_TASK = re.compile(
    r"^    (?P<name>[^:]+) :(?P<tags>(?:(?:crit|done|active), )*)(?P<a>\d+), (?P<b>\d+)$"
)


def parse_gantt(text: str) -> dict[str, list[dict[str, object]]]:
    """Mermaid gantt source -> {section: [task]}; fails on any line it does not understand."""
    lines = text.splitlines()
    assert lines[0] == "gantt"
    sections: dict[str, list[dict[str, object]]] = {}
    current = None
    for line in lines[1:]:
        head = line.strip().split(" ", 1)
        if head[0] in ("title", "dateFormat", "axisFormat", "todayMarker"):
            continue
        if head[0] == "section":
            current = head[1]
            sections[current] = []
            continue
        match = _TASK.match(line)
        assert match and current is not None, f"not a task line: {line!r}"
        start, end = int(match["a"]), int(match["b"])
        assert end > start
        tags = [t for t in match["tags"].split(", ") if t]
        sections[current].append({"name": match["name"], "tags": tags, "start": start, "end": end})
    return sections


def summary_of(tmp_path: Path) -> dict[str, object]:
    import json

    write_reports(tmp_path, mixed_record())
    return json.loads((tmp_path / "summary.json").read_text())  # type: ignore[no-any-return]


def test_mermaid_has_one_running_task_per_attempt_and_setup_apart(tmp_path: Path) -> None:
    summary = summary_of(tmp_path)
    model = build_timeline(records_from_summary(parse_summary(summary)))
    chart = parse_gantt(gantt(model, "gpu-tests"))
    attempts = [(j["name"], a) for j in summary["jobs"] for a in j["attempt_details"]]  # type: ignore[index,union-attr]
    assert set(chart) == {"renting / booting", "running"}
    assert len(chart["running"]) == len(attempts)  # every attempt here got a place
    # build spent 20 s getting its server: that part is drawn apart, before its run.
    (setup,) = chart["renting / booting"]
    run = next(t for t in chart["running"] if t["name"] == "build")
    assert setup["name"] == "build" and setup["tags"] == ["done"]
    assert setup["end"] == run["start"] and int(run["start"]) - int(setup["start"]) == 20_000
    by_name = {t["name"]: t for t in chart["running"]}
    assert by_name["unit | fast attempt 1 (failed, retried)"]["tags"] == ["crit", "done"]
    assert by_name["unit | fast attempt 2"]["tags"] == []
    assert by_name["test (RTX 4090) attempt 2 (failed)"]["tags"] == ["crit"]
    assert by_name["bench (timed out)"]["tags"] == ["crit"]


def test_summary_md_carries_the_chart(tmp_path: Path) -> None:
    write_reports(tmp_path, mixed_record())
    md = (tmp_path / "summary.md").read_text()
    block = md.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert parse_gantt(block)["running"]


def _decoded(text: str) -> str:
    """What Mermaid shows for a text: its entity codes (#58;) as the characters."""
    return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), text)


@pytest.mark.parametrize(
    "name",
    [
        'x: y; z #1 %% <b>&"`',
        "title of a job",
        "section 2",
        "2026-12-01 nightly",
        "click me",
        "%%{init: {}}%%",
        "```",
        "ﬂ°°58¶ß",
        "Größe 🚀 [x](y) *a* _b_ |c|",
    ],
)
def test_names_keep_their_text_and_cannot_break_the_chart_or_the_svg(name: str) -> None:
    records = [AttemptRecord("j", name, 1, 100.0, 110.0, 101.0, None)]
    chart = gantt(build_timeline(records), name)
    tasks = parse_gantt(chart)  # every line a statement it knows: nothing read as syntax
    (task,) = tasks["running"]
    assert _decoded(str(task["name"])) == name
    title = chart.splitlines()[1].removeprefix("    title ")
    assert _decoded(title) == name
    # What gantt's lexer reads as syntax is left only inside entity codes, and no text starts
    # with a word its lexer takes for a statement.
    for text in (title, str(task["name"])):
        assert not re.search(r"[:;%`\n]", re.sub(r"#\d+;", "", text)), text
        assert not re.match(r"(?i)title|section|click|\d{4}-", text), text
    svg = render_svg(build_timeline(records), name)
    root = ET.fromstring(svg)  # well-formed: the name is escaped
    assert name in "".join(root.itertext())


def test_a_name_with_a_newline_is_one_line() -> None:
    records = [AttemptRecord("j", "a\nsection b", 1, 100.0, 110.0, 101.0, None)]
    tasks = parse_gantt(gantt(build_timeline(records), "t"))
    assert [_decoded(str(t["name"])) for t in tasks["running"]] == ["a section b"]


def test_past_200_bars_the_title_says_so_and_no_empty_section_is_left() -> None:
    records = [
        AttemptRecord(f"j{i}", f"j{i}", 1, 100.0 + i, 110.0 + i, None, None) for i in range(250)
    ]
    chart = gantt(build_timeline(records), "big")
    tasks = parse_gantt(chart)
    assert list(tasks) == ["running"] and len(tasks["running"]) == MAX_TASKS
    assert all(tasks.values())  # a section without tasks is never drawn
    title = _decoded(chart.splitlines()[1])
    assert title == "    title big (the first 200 of 250 bars; summary.json has them all)"


@pytest.mark.parametrize(
    ("seconds", "axis"), [(0.4, "%H:%M:%S.%L"), (9.0, "%H:%M:%S.%L"), (60.0, "%H:%M:%S")]
)
def test_a_short_run_has_milliseconds_on_its_axis(seconds: float, axis: str) -> None:
    """Ticks less than a second apart would all read the same second."""
    records = [AttemptRecord("j", "j", 1, 100.0, 100.0 + seconds, None, None)]
    chart = gantt(build_timeline(records), "t")
    assert f"    axisFormat {axis}" in chart.splitlines()


def test_an_attempt_that_never_got_a_place_is_all_setup() -> None:
    records = [AttemptRecord("j", "j", 1, 0.0, 30.0, None, "provisioning_failed")]
    timeline = build_timeline(records)
    assert [(s.phase, s.outcome) for s in timeline.spans] == [("setup", "failed")]


def test_timeline_svg_has_a_bar_per_span_and_a_lane_per_job(tmp_path: Path) -> None:
    paths = write_reports(tmp_path, mixed_record())
    assert paths.timeline_svg == tmp_path / "timeline.svg"
    root = ET.fromstring(paths.timeline_svg.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    summary = summary_of(tmp_path)
    model = build_timeline(records_from_summary(parse_summary(summary)))
    assert len(bars) == len(model.spans) and len(model.jobs) == 5  # two jobs never ran
    colours = {r.get("fill") for r in bars}
    # setup, passed, failed, timed out, retried: each its own colour (runner.outcome)
    assert {"#afb8c1", "#2da44e", "#cf222e", "#bc4c00", "#ff8182"} <= colours


def test_reports_are_readable_by_others_under_the_usual_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        from runner.report import _umask

        _umask.cache_clear()
        write_reports(tmp_path, mixed_record())
    finally:
        os.umask(old)
        _umask.cache_clear()
    for name in ("junit.xml", "summary.json", "summary.md", "timeline.svg"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_a_failure_continue_on_error_allows_reads_failed_allowed_in_every_report(
    tmp_path: Path,
) -> None:
    import dataclasses
    import io
    import json

    from runner.report.github_actions import annotate_failures

    record = mixed_record()
    jobs = tuple(
        dataclasses.replace(j, continue_on_error=True) if j.id == "test-4090" else j
        for j in record.pipeline.jobs
    )
    record = dataclasses.replace(record, pipeline=dataclasses.replace(record.pipeline, jobs=jobs))
    write_reports(tmp_path, record)
    summary = json.loads((tmp_path / "summary.json").read_text())
    job = next(j for j in summary["jobs"] if j["id"] == "test-4090")
    assert job["allowed_failure"] is True
    assert "| 🟡 failed (allowed) |" in (tmp_path / "summary.md").read_text()
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    props = {
        p.get("name"): p.get("value")
        for s in junit.iter("testsuite")
        if s.get("name", "").startswith("test (RTX 4090)")
        for p in s.iter("property")
    }
    assert props["clore.status"] == "failed (allowed)"
    out = io.StringIO()
    annotate_failures(parse_summary(summary), out)
    lines = out.getvalue().splitlines()
    assert any(x.startswith("::warning ") and "failed (allowed)" in x for x in lines)
    assert not any(x.startswith("::error ") and "RTX 4090" in x for x in lines)


def test_nothing_ran_means_no_chart() -> None:
    assert gantt(build_timeline([])) == ""


def test_unknown_ci_facts_are_null_not_empty() -> None:
    from runner.report.summary import ci_info

    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r"}
    info = ci_info({**env, "GITHUB_RUN_ID": "7"})
    assert info is not None
    assert info.run_attempt is None and info.sha is None and info.event_name is None
    assert info.run_url == "https://github.com/o/r/actions/runs/7"
