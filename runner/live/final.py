"""The end of a run on screen: the table of summary.md, the failed jobs' last log lines, totals,
budget use, the baseline delta, and where the reports are.

Drawn from the summary, as summary.md is, so the screen and the file cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from runner.figures import counted, duration, money, pct, rate
from runner.outcome import Outcome, outcome, run_line
from runner.untrusted import console_line

if TYPE_CHECKING:
    from runner.report.summary_model import Comparison, Job, Summary

FAILED_LOG_LINES = 5  # per failed job; the whole log is in logs/<job>.log
MAX_FAILED_LOGS = 5
# Rows of the table on screen. Past it, the jobs that did not pass are shown first and a line
# counts the rest (summary.md lists every job): 200 rows would scroll the run's output away.
MAX_TABLE_ROWS = 40


class Column(NamedTuple):
    """One column of the jobs table, as rich's Table takes it. Every cell is one line, cut with
    an ellipsis.

    A table wider than the terminal narrows the columns that `give_way` first (rich's wrapable
    columns: the widest first); only when they have nothing left does every column lose the
    same share, and a column left with no room is dropped. So the numbers (never giving way)
    are the last to be cut."""

    header: str
    justify: str = "left"
    min_width: int | None = None
    max_width: int | None = None
    gives_way: bool = False


Cell = tuple[str, str]  # (text, style)


def look(job: Job) -> Outcome:
    """A job's outcome as every report words and colours it (runner.outcome)."""
    return outcome(job.status, allowed=job.allowed_failure, flaky=job.flaky)


def status_word(job: Job) -> str:
    """A job's status as summary.md words it: `failed (allowed)`, `passed (flaky)`."""
    return look(job).words


def render_final(summary: Summary, out_dir: Path) -> RenderableType:
    shown = shown_jobs(summary.jobs)
    parts: list[RenderableType] = [Text(""), jobs_table(summary, shown)]
    left_out = len(summary.jobs) - len(shown)
    if left_out:
        parts.append(Text(_left_out(summary.jobs, shown), style="dim"))
    parts.extend(_failed_logs(summary))
    parts.append(_totals(summary))
    if summary.comparison:
        parts.append(_baseline(summary.comparison))
    parts.append(Text(reports_line(out_dir), style="dim"))
    return Group(*parts)


def shown_jobs(jobs: list[Job]) -> list[Job]:
    """At most MAX_TABLE_ROWS jobs, in the run's order: every one that did not pass before any
    that passed."""
    if len(jobs) <= MAX_TABLE_ROWS:
        return jobs
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].status == "passed")
    keep = sorted(order[:MAX_TABLE_ROWS])
    return [jobs[i] for i in keep]


def _left_out(jobs: list[Job], shown: list[Job]) -> str:
    counts: dict[str, int] = {}
    ids = {j.id for j in shown}
    for job in jobs:
        if job.id not in ids:
            counts[counted(job.status)] = counts.get(counted(job.status), 0) + 1
    words = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"… and {len(jobs) - len(shown)} more jobs ({words}): every job is in summary.md"


def jobs_table(summary: Summary, shown: list[Job] | None = None) -> Table:
    columns, rows = table_cells(summary, shown)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(
            column.header,
            justify="right" if column.justify == "right" else "left",
            no_wrap=not column.gives_way,  # rich narrows only the wrapable columns first
            overflow="ellipsis",
            min_width=column.min_width,
            max_width=column.max_width,
        )
    for row in rows:
        # Each cell stays on one line, in a column that gives way too: cut, not wrapped.
        table.add_row(
            *(Text(text, style=style, no_wrap=True, overflow="ellipsis") for text, style in row)
        )
    return table


def table_cells(
    summary: Summary, shown: list[Job] | None = None
) -> tuple[list[Column], list[list[Cell]]]:
    """The jobs table's columns and rows (each cell its text and style)."""
    compare = {j.id: j for j in summary.comparison.jobs} if summary.comparison else {}
    # Names, GPU and the note give way on a narrow terminal; numbers are cut last.
    jobs = summary.jobs
    # A column nobody has a value in (GPU and $/h on the local backend) is left out.
    gpus = any(j.gpu for j in jobs)
    rates = any(j.usd_per_hour is not None for j in jobs)
    columns = [Column("job", max_width=32, gives_way=True), Column("status", min_width=8)]
    if gpus:
        columns.append(Column("gpu", max_width=20, gives_way=True))
    columns.append(Column("time", "right", min_width=6))
    if rates:
        columns.append(Column("$/h", "right", min_width=5))
    columns += [Column("cost", "right", min_width=7), Column("tries", "right", min_width=5)]
    if compare:
        columns += [Column("Δ cost", "right"), Column("Δ time", "right")]
    columns.append(Column("note", gives_way=True))
    rows: list[list[Cell]] = []
    for job in jobs if shown is None else shown:
        seen = look(job)
        cells = [(console_line(job.name), ""), (seen.words, seen.style)]
        if gpus:
            cells.append((console_line(job.gpu or "–"), ""))
        cells.append((duration(job.duration_s), ""))
        if rates:
            cells.append((rate(job.usd_per_hour), ""))
        cells += [(money(job.cost_usd), ""), (str(job.attempts), "")]
        if compare:
            delta = compare.get(job.id)
            cells += [
                (pct(delta.cost_delta_pct if delta else None), ""),
                (pct(delta.duration_delta_pct if delta else None), ""),
            ]
        cells.append((console_line(" ".join(job.reason.split())), ""))
        rows.append(cells)
    return columns, rows


def _failed_logs(summary: Summary) -> list[RenderableType]:
    out: list[RenderableType] = []
    for kind, line in failed_log_lines(summary):
        if kind == "title":
            title = Text(line)
            title.stylize("bold")
            out.append(title)
        elif kind == "line":
            out.append(Text(line, no_wrap=True, overflow="ellipsis"))
        else:
            out.append(Text(line))
    return out


def failed_log_lines(summary: Summary) -> list[tuple[str, str]]:
    """(kind, text): a failed job's "title", its last log lines ("line", cut to the width with an
    ellipsis), and a last line counting the failed jobs left out ("more")."""
    out: list[tuple[str, str]] = []
    failed = [j for j in summary.jobs if j.log_tail]
    for job in failed[:MAX_FAILED_LOGS]:
        out.append(("title", f"{console_line(job.name)}: last lines of logs/{job.id}.log"))
        for line in job.log_tail[-FAILED_LOG_LINES:]:
            out.append(("line", "  " + console_line(line)))
    if len(failed) > MAX_FAILED_LOGS:
        out.append(("more", f"… and {len(failed) - MAX_FAILED_LOGS} more failed jobs in logs/"))
    return out


def _totals(summary: Summary) -> Text:
    text = Text(no_wrap=False)
    for part, style in totals_parts(summary):
        text.append(part, style=style)
    return text


def totals_parts(summary: Summary) -> list[Cell]:
    """The totals line, (text, style) by part; it wraps at the width."""
    counts = ", ".join(f"{n} {counted(status)}" for status, n in summary.jobs_by_status.items())
    allowed = sum(1 for job in summary.jobs if job.allowed_failure)
    parts = [(run_line(summary.status, allowed), outcome(summary.status).style)]
    parts.append((f": {counts} · {money(summary.total_cost_usd)}", ""))
    if summary.budget_usd:
        parts.append((f" ({summary.budget_used_pct:g}% of {rate(summary.budget_usd)})", ""))
    parts.append((f" · {duration(summary.duration_s)}", ""))
    return parts


def reports_line(out_dir: Path) -> str:
    where = console_line(str(out_dir).rstrip("/") + "/")
    return f"reports: {where} (summary.md, junit.xml, logs/)"


def _baseline(comparison: Comparison) -> Text:
    return Text(baseline_line(comparison))


def baseline_line(comparison: Comparison) -> str:
    total = comparison.total
    return (
        f"{pct(total.cost_delta_pct)} cost, {pct(total.duration_delta_pct)} time vs "
        f"{console_line(comparison.label)} "
        f"({money(total.cost_usd)} vs {money(total.baseline_cost_usd)})"
    )
