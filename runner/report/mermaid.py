"""The timeline as a Mermaid `gantt` chart, which GitHub draws in summary.md, the step summary
and the PR comment: a section for getting places (renting, booting) and one for running, one
task per attempt, failed attempts marked `crit` and retried ones `crit, done`."""

from __future__ import annotations

import re

from runner.report.timeline import Span, Timeline, phases

MAX_TASKS = 200  # GitHub gives up on (or crawls through) much larger charts
_UNSAFE = re.compile(r"[^\w .,()+/@=-]")  # ':' ';' '#' and '%' mean something to Mermaid
_SECTIONS = (("setup", "renting / booting"), ("run", "running"))


def gantt(timeline: Timeline, title: str = "") -> str:
    """Mermaid source (without the code fence); "" when nothing ran."""
    if not timeline.spans:
        return ""
    lines = ["gantt", f"    title {_text(title) or 'timeline'}", "    dateFormat x"]
    # Wall-clock times (the reader's time zone): a relative axis from 0 would be shifted by
    # zones that are not whole hours off UTC.
    lines += ["    axisFormat %H:%M:%S", "    todayMarker off"]
    shown = 0
    for phase, heading in _SECTIONS:
        spans = phases(timeline, phase)  # type: ignore[arg-type]
        if not spans:
            continue
        lines.append(f"    section {heading}")
        for span in spans[: max(0, MAX_TASKS - shown)]:
            lines.append(f"    {_task(span, timeline.origin)}")
        shown += len(spans)
    if shown > MAX_TASKS:
        lines.append(f"    section … {shown - MAX_TASKS} more attempts in summary.json")
    return "\n".join(lines) + "\n"


def _task(span: Span, origin: float) -> str:
    tags = {"passed": "", "failed": "crit, ", "retried": "crit, done, "}[span.outcome]
    if span.phase == "setup" and span.outcome == "passed":
        tags = "done, "
    start_ms = round((origin + span.start_s) * 1000)
    end_ms = max(start_ms + 1, round((origin + span.end_s) * 1000))  # a task must have a length
    return f"{_text(span.label) or '-'} :{tags}{start_ms}, {end_ms}"


def _text(value: str) -> str:
    return " ".join(_UNSAFE.sub(" ", value).split())[:80]
