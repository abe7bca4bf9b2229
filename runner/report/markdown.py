"""`summary.md`: the summary rendered as Markdown, and a clean cut.

It reads the summary alone, so `clore-run comment SUMMARY.json` renders the same Markdown
later from the JSON file. Written in Python rather than as a jinja2 template: importing jinja2
took longer than writing every other report of a run of 200 short jobs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from runner import untrusted
from runner.figures import counted, duration, money, pct, rate
from runner.outcome import GIVEN_BACK, MARKS, exit_reason, outcome, run_line
from runner.report.text import escape_text

if TYPE_CHECKING:
    from runner.report.summary_model import Comparison, Summary
    from runner.report.summary_model import Job as SummaryJob
    from runner.report.timeline import Timeline

_CELL_LIMIT = 200
_BACKTICKS = re.compile(r"`{3,}")
# What changes inline Markdown in a cell: code spans, emphasis, links and images, strikethrough,
# the escape itself and the cell's end (`!` needs a `[`, which is escaped).
_INLINE = re.compile(r"([\\`*_\[\]~|])")
_MENTION = re.compile(r"([@#])(?=\w)")  # GitHub links @user and #123 even when escaped
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
MAX_FAILED_TESTS = 100  # listed; the rest are in junit.xml
MAX_FAILED_LOGS = 20
_COUNTED = ("passed", "failed", "timed_out", "error", "skipped", "cancelled")


def render_markdown(s: Summary, timeline: Timeline | None = None) -> str:
    """Render `summary.md` from a summary; `timeline`: its model, when already built. Every
    value from a job or a test goes through `cell` (one line, `|` and `<` escaped), `remote`
    (text a server could have written), or `html_text` inside an HTML element."""
    cmp = s.comparison
    parts = [_headline(s, cmp), _jobs_table(s, cmp), _failed_tests(s), _failed_logs(s)]
    warnings = [w for w in s.warnings if not w.startswith(GIVEN_BACK)]  # beside the cost
    if warnings:
        parts.append("\n### Warnings\n\n")
        parts.extend(f"- {cell(w, 500)}\n" for w in warnings)
    chart = summary_gantt(s, timeline)
    if chart:
        parts.append(f"\n### Timeline\n\n```mermaid\n{chart}```\n")
    parts.append(f"\n{_footer(s, cmp)}\n")
    return "".join(parts)


def _headline(s: Summary, cmp: Comparison | None) -> str:
    jobs, by, tests = len(s.jobs), s.jobs_by_status, s.tests
    present = [status for status in _COUNTED if by.get(status)]
    allowed = sum(1 for j in s.jobs if j.allowed_failure)
    text = f"## {icon(s.status)} {cell(s.pipeline.name)}: {run_line(s.status, allowed)}\n\n"
    text += f"**{jobs} job{_plural(jobs)}**"
    if present:
        text += ":" + ",".join(f" {by[status]} {counted(status)}" for status in present)
    text += "\n"
    if tests.total:
        text += f" · **tests**: {tests.passed} passed"
        for count, word in (
            (tests.failures, "failed"),
            (tests.errors, "errored"),
            (tests.skipped, "skipped"),
        ):
            if count:
                text += f", {count} {word}"
        if tests.flaky_jobs:
            text += f", {tests.flaky_jobs} flaky job{_plural(tests.flaky_jobs)}"
        text += "\n"
    text += f" · **cost**: {money(s.total_cost_usd)}"
    if s.budget_usd:
        text += f" ({s.budget_used_pct}% of the {rate(s.budget_usd)} budget)"
    if s.hedges.boots_given_back:
        given_back = s.hedges.boots_given_back
        text += f" (hedged boots: {given_back} given back, {money(s.hedges.cost_usd)})"
    text += f" · **time**: {duration(s.duration_s)} · **backend**: {cell(s.backend)}\n"
    for given in (w for w in s.warnings if w.startswith(GIVEN_BACK)):
        text += f" · **{GIVEN_BACK.strip(': ')}**: {cell(given.removeprefix(GIVEN_BACK), 500)}\n"
    if s.exit_code is not None:  # a summary from before it was kept has none
        text += f" · **exit {s.exit_code}**: {exit_reason(s.exit_code, allowed)}\n"
    if cmp:
        total = cmp.total
        text += (
            f"\n**{pct(total.cost_delta_pct)} GPU cost vs {cell(cmp.label)}** "
            f"({money(total.cost_usd)} vs {money(total.baseline_cost_usd)}), "
            f"**{pct(total.duration_delta_pct)} time** ({duration(total.duration_s)} vs "
            f"{duration(total.baseline_duration_s)})\n"
        )
    return text + "\n"


def _plural(count: object) -> str:
    return "s" if count != 1 else ""


def _jobs_table(s: Summary, cmp: Comparison | None) -> str:
    deltas = {j.id: j for j in cmp.jobs} if cmp else {}
    rows = [
        "| Job | Status | GPU | Server | Time | $/h | Cost | Attempts |"
        + (" Δ cost | Δ time |" if cmp else "")
        + " Note |\n",
        "|---|---|---|---|--:|--:|--:|--:|" + ("--:|--:|" if cmp else "") + "---|\n",
    ]
    for j in s.jobs:
        seen = outcome(j.status, allowed=j.allowed_failure, flaky=j.flaky)
        status = f"{seen.mark} {seen.words}"
        server = remote((j.host or {}).get("server_id") or j.server or "") or "–"
        row = (
            f"| {cell(j.name)} | {status} | {remote(j.gpu or '') or '–'} | {server} | "
            f"{duration(j.duration_s)} | {rate(j.usd_per_hour)} | {money(j.cost_usd)} "
            f"| {j.attempts} |"
        )
        if cmp:
            d = deltas.get(j.id)
            row += f" {pct(d.cost_delta_pct if d else None)} |"
            row += f" {pct(d.duration_delta_pct if d else None)} |"
        rows.append(f"{row} {remote(j.reason)} |\n")
    return "".join(rows)


def _failed_tests(s: Summary) -> str:
    """'Failed tests', then those of jobs whose failure `continue-on-error` allows: they did
    not fail the run, and a reader must not take them for what did."""
    failing = [j for j in s.jobs if not j.allowed_failure]
    allowed = [j for j in s.jobs if j.allowed_failure]
    return _tests_list(failing, "Failed tests") + _tests_list(
        allowed, "Allowed to fail (continue-on-error)"
    )


def _tests_list(jobs: list[SummaryJob], title: str) -> str:
    failed = [(j, t) for j in jobs for t in j.failed_tests]
    if not failed:
        return ""
    lines = [f"\n### {title}\n\n"]
    for j, t in failed[:MAX_FAILED_TESTS]:
        mark = "💥" if t.kind == "error" else "❌"
        if t.scope == "job":
            what = "the job"
        else:
            what = remote((f"{t.classname}." if t.classname else "") + t.name)
        message = f": {remote(t.message, 300)}" if t.message else ""
        lines.append(f"- {mark} **{cell(j.name)}** · {what}{message}\n")
    if len(failed) > MAX_FAILED_TESTS:
        lines.append(f"- … and {len(failed) - MAX_FAILED_TESTS} more in junit.xml\n")
    return "".join(lines)


def _failed_logs(s: Summary) -> str:
    logs = [j for j in s.jobs if j.log_tail]
    if not logs:
        return ""
    parts = ["\n### Logs of failed jobs\n"]
    for j in logs[:MAX_FAILED_LOGS]:
        text = "\n".join(j.log_tail)
        marker = fence(text)
        parts.append(
            f"\n<details><summary>{html_text(j.name)}: last {len(j.log_tail)} lines of "
            f"logs/{html_text(j.id)}.log</summary>\n\n{marker}text\n{text}\n{marker}\n\n"
            "</details>\n"
        )
    if len(logs) > MAX_FAILED_LOGS:
        more = len(logs) - MAX_FAILED_LOGS
        parts.append(f"\n… and the logs of {more} more failed jobs in logs/\n")
    return "".join(parts)


def _footer(s: Summary, cmp: Comparison | None) -> str:
    text = "<sub>"
    ci = s.ci
    if ci:
        text += f"[CI run {cell(ci.run_id)}]({ci.run_url})"
        if ci.sha:
            text += f" · commit {cell(ci.sha[:7])}"
        text += " · "
    if cmp and cmp.baseline_run_url:
        text += f"[baseline run]({cmp.baseline_run_url}) · "
    return text + f"clore-run {s.tool.version} · started {s.started_at}</sub>"


def remote(value: object, limit: int = _CELL_LIMIT) -> str:
    """Text a server could have written (GPU and host names, reasons, test names and
    messages): no link, image, HTML, mention or table break of its own; links only where we
    make them."""
    return _remote(str(value), limit)


@functools.lru_cache(maxsize=1024)
def _remote(text: str, limit: int) -> str:
    # Most rows repeat their neighbours' GPU, server and reason: each is escaped once.
    return untrusted.markdown(text, limit)


def summary_gantt(summary: Summary, timeline: Timeline | None = None) -> str:
    """The run's timeline as Mermaid source, "" when nothing ran."""
    from runner.report.mermaid import gantt  # with the reports, not with the console
    from runner.report.timeline import build_timeline, records_from_summary

    model = build_timeline(records_from_summary(summary)) if timeline is None else timeline
    return gantt(model, summary.pipeline.name)


def cell(value: object, limit: int = _CELL_LIMIT) -> str:
    """Our own text (job and pipeline names, labels) as it reads, inside a Markdown table cell
    or list item: one line; no code span, emphasis, link, strikethrough, entity, HTML or table
    break of its own; @mentions and #references not linked."""
    text = " ".join(str(value).split())  # newlines would end the table row
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _INLINE.sub(r"\\\1", text).replace("&", "&amp;").replace("<", "&lt;")
    return _MENTION.sub("\\1\u200b", text) if "@" in text or "#" in text else text


def html_text(value: object, limit: int = _CELL_LIMIT) -> str:
    """Text inside an HTML element (`<summary>`): one line, HTML-escaped. Markdown is not read
    there, so the `cell` escapes (`\\|`) would show as they are."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return escape_text(text)


def icon(status: object) -> str:
    return MARKS.get(str(status), "❔")


def fence(text: str) -> str:
    """A code fence longer than any backtick run inside `text`, so the log cannot close it."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=2)
    return "`" * (longest + 1)


def cut_markdown(text: str, limit: int, size: Callable[[str], int], note: str) -> str:
    """`text` if it fits in `limit`, else its longest prefix of whole lines that fits with `note`.

    Cut cleanly: open code fences and `<details>` blocks are closed so the rest of the page (or
    the comment) still renders.
    """
    if size(text) <= limit:
        return text
    blocks = _Blocks()
    kept: list[str] = []
    used = 0
    budget = limit - size(note) - 1  # 1: the newline a cut last line may need
    for line in text.splitlines(keepends=True):
        after = blocks.after(line)
        if used + size(line) + size(after.closers()) > budget:
            break
        kept.append(line)
        used += size(line)
        blocks = after
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    return "".join(kept) + blocks.closers() + note


class _Blocks(NamedTuple):
    """Which Markdown blocks are open after some lines: a code fence, `<details>` elements."""

    fence: str = ""
    details: int = 0

    def after(self, line: str) -> _Blocks:
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if not self.fence:
                return _Blocks(marker, self.details)
            if marker[0] == self.fence[0] and len(marker) >= len(self.fence):
                return _Blocks("", self.details)
            return self
        if self.fence:  # HTML inside a code block is just text
            return self
        opened = line.count("<details") - line.count("</details>")
        return _Blocks("", max(0, self.details + opened))

    def closers(self) -> str:
        return (self.fence + "\n" if self.fence else "") + "</details>\n" * self.details
