"""The end-of-run report on a plain console (a CI log, a pipe): rich's table without colour, the
numbers kept at a narrow width, the row cap."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console as RichConsole

from runner.engine.console import Console
from runner.live.final import MAX_TABLE_ROWS, render_final
from runner.report.summary_model import Summary, parse_summary

OUT = Path("out")
STATUSES = ("passed", "failed", "timed_out", "error", "skipped", "cancelled", "interrupted")


def rich_text(summary: Summary, width: int = 120) -> str:
    """What the console printed with rich before: its console as made for a pipe."""
    buffer = io.StringIO()
    console = RichConsole(
        file=buffer, width=width, highlight=False, markup=False, emoji=False, soft_wrap=True,
        _environ={},
    )  # fmt: skip
    console.print(render_final(summary, OUT))
    return buffer.getvalue()


def job(
    i: int, status: str = "passed", name: str = "", reason: str = "", **extra: Any
) -> dict[str, Any]:
    return {
        "id": f"j{i}", "name": name or f"j{i}", "status": status, "duration_s": 1.5 * i,
        "cost_usd": 0.01 * i, "attempts": 1 + i % 3, "reason": reason, **extra,
    }  # fmt: skip


def summary_of(jobs: list[dict[str, Any]], **extra: Any) -> Summary:
    by: dict[str, int] = {}
    for j in jobs:
        by[j["status"]] = by.get(j["status"], 0) + 1
    return parse_summary({
        "jobs": jobs, "status": "failed" if by.keys() - {"passed"} else "passed",
        "jobs_by_status": by, "total_cost_usd": sum(j["cost_usd"] for j in jobs),
        "duration_s": 61.0, **extra,
    })  # fmt: skip


CASES = {
    "one passed job": summary_of([job(1)]),
    "200 short jobs, past the row cap": summary_of([job(i) for i in range(200)]),
    "cap with failures beyond row 40": summary_of(
        [job(i, "failed" if i in (3, 57) else "passed", reason="exit code 1") for i in range(60)]
    ),
    "wide names": summary_of(
        [job(1, name="n" * 31), job(2, name="m" * 32), job(3, name="w" * 33), job(4, name="x" * 90)]
    ),
    "a note wider than the terminal": summary_of(
        [job(1, "failed", reason="exit code 1 " * 6), job(2, name="a-long-name-" * 4)]
    ),
    "a note that would crowd out the numbers": summary_of(
        [job(1, "failed", reason="exit code 1 " * 20), job(2, name="n" * 40)]
    ),
    "gpu, rates, flaky, allowed failure, budget": summary_of(
        [
            job(1, gpu="RTX 4090", usd_per_hour=0.42, flaky=True),
            job(2, "failed", reason="boom", gpu="A100 80GB PCIe long name", allowed_failure=True),
            job(3, "timed_out", reason="timed out after 6 s", usd_per_hour=1.5),
        ],
        budget_usd=10.0, budget_used_pct=12.5,
    ),
    "failed logs": summary_of(
        [job(i, "failed", reason="exit code 2", log_tail=[f"line {k} " * (k * 7) for k in range(8)])
         for i in range(7)]
    ),
    "baseline comparison": summary_of(
        [job(1), job(2, "error", reason="sshd never answered")],
        comparison={
            "label": "main",
            "jobs": [{"id": "j1", "cost_delta_pct": 12.0, "duration_delta_pct": -3.5}],
            "total": {"cost_delta_pct": 5.0, "duration_delta_pct": -1.0, "cost_usd": 0.03,
                      "baseline_cost_usd": 0.02},
        },
    ),
}  # fmt: skip


def test_the_plain_console_prints_rich_s_table_for_every_case() -> None:
    for name, summary in {
        **CASES,
        "wide characters": summary_of([job(1, name="名前" * 20)]),
    }.items():
        buffer = io.StringIO()
        Console(buffer, live=False, tick_s=0, env={}).final_report(summary, OUT)
        assert buffer.getvalue() == rich_text(summary), name
        assert "\x1b" not in buffer.getvalue(), name


def test_a_long_note_is_cut_and_every_number_stays_at_a_narrow_width() -> None:
    """The note gives way (and the name and GPU with it), not the numbers: rich used to take
    the excess from every column alike, which left time, cost and tries no room at all."""
    note = "sshd on the server never answered after 3 tries over 120 s; excluded " * 3
    summary = summary_of(
        [job(1, "failed", reason=note, gpu="RTX 4090", usd_per_hour=1.25), job(2, gpu="T4")]
    )
    for width in (60, 80, 120):
        screen = rich_text(summary, width)
        header, _, failed, passed = screen.splitlines()[1:5]
        assert re.search(r" time +\$/h +cost +tries +no\S* *$", header), (width, header)
        assert re.search(r" 1\.5s +\$1\.25 +\$0\.0100 +2 +ss.*…$", failed), (width, failed)
        assert re.search(r" 3\.0s +– +\$0\.0200 +3 *$", passed), (width, passed)
        assert max(len(line) for line in screen.splitlines()) <= width


def test_the_row_cap_holds_in_the_plain_report() -> None:
    plain = rich_text(CASES["200 short jobs, past the row cap"])
    rows = [line for line in plain.splitlines() if re.match(r"j\d+ ", line)]
    assert len(rows) == MAX_TABLE_ROWS


def test_the_totals_line_counts_errors_in_words() -> None:
    from runner.live.final import totals_parts

    summary = {
        "status": "error",
        "jobs_by_status": {"error": 2, "skipped": 2},
        "total_cost_usd": 0.0,
        "budget_usd": None,
        "duration_s": 32.4,
    }
    line = "".join(text for text, _ in totals_parts(parse_summary(summary)))
    # Not "error: 2 error": a run's word is a participle, as the counts say it, and a line
    # that starts `error:` reads as a message of another shape.
    assert line.startswith("errored: 2 errored, 2 skipped · ")
