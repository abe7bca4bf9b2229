"""The end of a run on screen: the table of summary.md, the failed jobs' last log lines, totals,
budget use, the baseline delta, and where the reports are.

Drawn from the summary dict, as summary.md is, so the screen and the file cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from runner.report.markdown import duration, human, money, pct, rate
from runner.untrusted import console_line

FAILED_LOG_LINES = 5  # per failed job; the whole log is in logs/<job>.log
MAX_FAILED_LOGS = 5
# Rows of the table on screen. Past it, the jobs that did not pass are shown first and a line
# counts the rest (summary.md lists every job): 200 rows would scroll the run's output away,
# and laying them out took longer than running 200 short jobs.
MAX_TABLE_ROWS = 40
_BAD = ("failed", "timed_out", "error")
_STYLE = {"passed": "green", "skipped": "dim", "cancelled": "yellow", "interrupted": "yellow"}


def status_word(job: Mapping[str, Any]) -> str:
    """A job's status as summary.md words it: `failed (allowed)`, `passed (flaky)`."""
    word = human(job["status"])
    if job.get("allowed_failure"):
        word += " (allowed)"
    elif job.get("flaky"):
        word += " (flaky)"
    return word


def render_final(summary: Mapping[str, Any], out_dir: Path) -> RenderableType:
    shown = shown_jobs(summary["jobs"])
    parts: list[RenderableType] = [Text(""), jobs_table(summary, shown)]
    left_out = len(summary["jobs"]) - len(shown)
    if left_out:
        parts.append(Text(_left_out(summary["jobs"], shown), style="dim"))
    parts.extend(_failed_logs(summary))
    parts.append(_totals(summary))
    comparison = summary.get("comparison")
    if comparison:
        parts.append(_baseline(comparison))
    where = console_line(str(out_dir).rstrip("/") + "/")
    parts.append(Text(f"reports: {where} (summary.md, junit.xml, logs/)", style="dim"))
    return Group(*parts)


def shown_jobs(jobs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """At most MAX_TABLE_ROWS jobs, in the run's order: every one that did not pass before any
    that passed."""
    if len(jobs) <= MAX_TABLE_ROWS:
        return jobs
    order = sorted(range(len(jobs)), key=lambda i: jobs[i]["status"] == "passed")
    keep = sorted(order[:MAX_TABLE_ROWS])
    return [jobs[i] for i in keep]


def _left_out(jobs: list[Mapping[str, Any]], shown: list[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    ids = {j["id"] for j in shown}
    for job in jobs:
        if job["id"] not in ids:
            counts[human(job["status"])] = counts.get(human(job["status"]), 0) + 1
    words = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"… and {len(jobs) - len(shown)} more jobs ({words}): every job is in summary.md"


def jobs_table(summary: Mapping[str, Any], shown: list[Mapping[str, Any]] | None = None) -> Table:
    compare = {j["id"]: j for j in (summary.get("comparison") or {}).get("jobs", [])}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    # Numbers are never cut; names, GPU and the note give way on a narrow terminal.
    jobs = summary["jobs"]
    # A column nobody has a value in (GPU and $/h on the local backend) is left out.
    gpus = any(j.get("gpu") for j in jobs)
    rates = any(j.get("usd_per_hour") is not None for j in jobs)
    table.add_column("job", no_wrap=True, overflow="ellipsis", max_width=32)
    table.add_column("status", no_wrap=True, overflow="ellipsis", min_width=8)
    if gpus:
        table.add_column("gpu", no_wrap=True, overflow="ellipsis", max_width=20)
    table.add_column("time", justify="right", no_wrap=True, min_width=6)
    if rates:
        table.add_column("$/h", justify="right", no_wrap=True, min_width=5)
    for name, width in (("cost", 7), ("tries", 5)):
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    if compare:
        table.add_column("Δ cost", justify="right", no_wrap=True)
        table.add_column("Δ time", justify="right", no_wrap=True)
    table.add_column("note", no_wrap=True, overflow="ellipsis", ratio=1)
    for job in jobs if shown is None else shown:
        word = status_word(job)
        style = _STYLE.get(job["status"], "bold red" if job["status"] in _BAD else "")
        if job.get("allowed_failure"):
            style = "yellow"
        cells = [Text(console_line(job["name"])), Text(word, style=style)]
        if gpus:
            cells.append(Text(console_line(job.get("gpu") or "–")))
        cells.append(Text(duration(job["duration_s"])))
        if rates:
            cells.append(Text(rate(job.get("usd_per_hour"))))
        cells += [Text(money(job["cost_usd"])), Text(str(job["attempts"]))]
        if compare:
            delta = compare.get(job["id"], {})
            cells += [
                Text(pct(delta.get("cost_delta_pct"))),
                Text(pct(delta.get("duration_delta_pct"))),
            ]
        cells.append(Text(console_line(" ".join(str(job.get("reason") or "").split()))))
        table.add_row(*cells)
    return table


def _failed_logs(summary: Mapping[str, Any]) -> list[RenderableType]:
    out: list[RenderableType] = []
    failed = [j for j in summary["jobs"] if j.get("log_tail")]
    for job in failed[:MAX_FAILED_LOGS]:
        title = Text(f"{console_line(job['name'])}: last lines of logs/{job['id']}.log")
        title.stylize("bold")
        out.append(title)
        for line in job["log_tail"][-FAILED_LOG_LINES:]:
            out.append(Text("  " + console_line(line), no_wrap=True, overflow="ellipsis"))
    if len(failed) > MAX_FAILED_LOGS:
        out.append(Text(f"… and {len(failed) - MAX_FAILED_LOGS} more failed jobs in logs/"))
    return out


def _totals(summary: Mapping[str, Any]) -> Text:
    by = summary.get("jobs_by_status", {})
    counts = ", ".join(f"{n} {human(status)}" for status, n in by.items())
    status = summary["status"]
    text = Text(no_wrap=False)
    text.append(status, style=_STYLE.get(status, "bold red"))
    text.append(f": {counts} · {money(summary['total_cost_usd'])}")
    if summary.get("budget_usd"):
        text.append(f" ({summary['budget_used_pct']:g}% of {rate(summary['budget_usd'])})")
    text.append(f" · {duration(summary['duration_s'])}")
    return text


def _baseline(comparison: Mapping[str, Any]) -> Text:
    total = comparison["total"]
    return Text(
        f"{pct(total['cost_delta_pct'])} cost, {pct(total['duration_delta_pct'])} time vs "
        f"{console_line(str(comparison.get('label', 'the baseline')))} "
        f"({money(total['cost_usd'])} vs {money(total['baseline_cost_usd'])})"
    )
