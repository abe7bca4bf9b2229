"""The timeline as a Mermaid `gantt` chart, which GitHub draws in summary.md, the step summary
and the PR comment: a section for getting places (renting, booting) and one for running, one
task per attempt, failed attempts (timed out too) marked `crit`, retried ones `crit, done` and
a failure continue-on-error allows `active` (not the red of one that failed the run); each
bar's text says its outcome in runner.outcome's words."""

from __future__ import annotations

import re

from runner.report.timeline import Span, Timeline, phases

MAX_TASKS = 200  # GitHub gives up on (or crawls through) much larger charts
MAX_LABEL = 80  # characters of a name shown on a bar
# Characters gantt's grammar reads (':' ends a task's text, '#' and ';' end a line in the
# versions GitHub has run, '%' starts a comment or a directive), the code fence's backtick,
# markup, and Mermaid's own entity markers. Each is written as Mermaid's entity code (`#58;`),
# which Mermaid turns into the character after parsing, so the name reads as it was written.
_ENCODED = re.compile("[:;#%`<>&\"'{}\\\ufb02\u00b0\u00b6\u00df]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Statements gantt's lexer matches at a line's start before a task's text (case-insensitive):
# a task named "title x" or "2026-12-01 nightly" would be read as one.
_KEYWORD = re.compile(
    r"(?i:gantt|dateformat|inclusiveenddates|topaxis|axisformat|tickinterval|includes|excludes"
    r"|todaymarker|weekday|weekend|displaymode|title|accdescription|acctitle|accdescr|section"
    r"|click|href|call)|\d{4}-\d\d-\d\d"
)
_TAGS = {
    "passed": "",
    "failed": "crit, ",
    "timed_out": "crit, ",
    "retried": "crit, done, ",
    "allowed": "active, ",
}
_SECTIONS = (("setup", "renting / booting"), ("run", "running"))


def gantt(timeline: Timeline, title: str = "") -> str:
    """Mermaid source (without the code fence); "" when nothing ran."""
    if not timeline.spans:
        return ""
    total = len(timeline.spans)
    heading = text(title) or "timeline"
    if total > MAX_TASKS:  # said where it is drawn: a section without tasks is not
        heading += f" (the first {MAX_TASKS} of {total} bars#59; summary.json has them all)"
    lines = ["gantt", f"    title {heading}", "    dateFormat x"]
    # Wall-clock times (the reader's time zone): a relative axis from 0 would be shifted by
    # zones that are not whole hours off UTC. A short run has ticks less than a second apart,
    # which would all read the same second.
    axis = "%H:%M:%S.%L" if timeline.end_s < 10 else "%H:%M:%S"
    lines += [f"    axisFormat {axis}", "    todayMarker off"]
    shown = 0
    for phase, section in _SECTIONS:
        spans = phases(timeline, phase)  # type: ignore[arg-type]
        drawn = spans[: max(0, MAX_TASKS - shown)]
        if not drawn:
            continue
        lines.append(f"    section {section}")
        lines += [f"    {_task(span, timeline.origin)}" for span in drawn]
        shown += len(drawn)
    return "\n".join(lines) + "\n"


def _task(span: Span, origin: float) -> str:
    tags = _TAGS[span.outcome]
    if span.phase == "setup" and span.outcome == "passed":
        tags = "done, "
    start_ms = round((origin + span.start_s) * 1000)
    end_ms = max(start_ms + 1, round((origin + span.end_s) * 1000))  # a task must have a length
    return f"{text(span.label) or '-'} :{tags}{start_ms}, {end_ms}"


def text(value: str) -> str:
    """`value` as the text of a title or task: one line of at most MAX_LABEL characters, each
    character Mermaid would read as syntax written as its entity code."""
    value = " ".join(_CONTROL.sub(" ", value).split())
    if len(value) > MAX_LABEL:
        value = value[: MAX_LABEL - 1] + "…"
    value = _ENCODED.sub(lambda m: f"#{ord(m.group())};", value)
    if _KEYWORD.match(value):
        value = f"#{ord(value[0])};{value[1:]}"
    return value
