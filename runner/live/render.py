"""The live table: a header (done/total, servers held, spend against the budget, elapsed) and
one row per job (stage, elapsed, attempts, cost so far), cut to the terminal's size.

Everything shown that came from a server goes through `console_line` first; cells are rich
`Text`, never markup, so a job cannot style or move anything either.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from runner.figures import duration, money, rate
from runner.live import board as B
from runner.live.words import clock_time, seconds, short_gpu_names
from runner.untrusted import console_line

_STYLE = {
    "passed": "green",
    "failed": "bold red",
    "timed out": "bold red",
    "error": "bold red",
    "skipped": "dim",
    "cancelled": "yellow",
}
_RESERVED_LINES = 4  # header, the table's head and rule, a line of "… more"
_NUMBERS_W = 7 + 3 + 7 + 4 * 3  # time, try, cost, and four gaps (padding, rule, padding)


def render_board(
    board: B.Board, now: float, started: float, height: int, width: int = 80
) -> RenderableType:
    board.queue_waiting_rows()
    rows = board.ordered()
    room = max(3, height - _RESERVED_LINES)
    shown, hidden = rows[:room], rows[room:]
    # Numbers keep their width; the job's name gets at most a sixth, the stage the rest.
    names = max((len(r.job.id) for r in shown), default=3)
    job_w = max(3, min(names, 32, max(10, width // 6)))
    stage_w = max(10, min(72, width - job_w - _NUMBERS_W))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("job", no_wrap=True, overflow="ellipsis", width=job_w)
    table.add_column("stage", no_wrap=True, overflow="ellipsis", width=stage_w)
    table.add_column("time", no_wrap=True, justify="right", width=7)
    table.add_column("try", no_wrap=True, justify="right", width=3)
    table.add_column("cost", no_wrap=True, justify="right", width=7)
    for row in shown:
        table.add_row(Text(row.job.id), stage_cell(row, now), *number_cells(row, now))
    parts: list[RenderableType] = [header(board, now, started), table]
    if hidden:
        tally = B.counts_by_stage(hidden)
        more = ", ".join(f"{n} {stage}" for stage, n in tally.items())
        parts.append(Text(f"… {len(hidden)} more: {more}", style="dim", no_wrap=True))
    return Group(*parts)


def number_cells(row: B.Row, now: float) -> tuple[Text, Text, Text]:
    """time, try, cost. A server rented ahead of its job's first attempt fills them too: the
    time it has been renting, the attempt it is for, and what it costs so far."""
    active = row.stage in B.ACTIVE and row.stage_since is not None
    if row.first_began is not None:
        time = ticking(row.elapsed_s(now))
    else:
        time = ticking(now - row.stage_since) if active and row.stage_since is not None else ""
    tries = str(row.attempt) if row.attempt else ("1" if active else "")
    billed = row.attempt or row.billing_since is not None
    return Text(time), Text(tries), Text(money(row.cost_usd(now)) if billed else "")


def header(board: B.Board, now: float, started: float) -> Text:
    total = len(board.rows)
    held = sum(1 for r in board.active() if r.stage not in (B.STARTING, "renting"))
    spent = board.spent_usd(now)
    budget = f" of {rate(board.budget_usd)}" if board.budget_usd else ""
    text = Text(no_wrap=True, overflow="ellipsis")
    if board.name:
        text.append(console_line(board.name), style="bold")
        text.append("  ")
    text.append(f"{board.done()}/{total} done", style="bold")
    text.append(f" · {held} held · {money(spent)}{budget} · {ticking(now - started)}")
    return text


def ticking(span_s: float) -> str:
    """Whole seconds, so a ticking clock does not flicker with decimals: `7s`, `4m 05s`."""
    span = max(0, int(span_s))
    return f"{span}s" if span < 60 else duration(span)


def stage_cell(row: B.Row, now: float) -> Text:
    if row.stage == B.DONE:
        status = row.status or "done"
        style = _STYLE.get(status.split(" (")[0], "")
        return Text(status, style=style, no_wrap=True, overflow="ellipsis")
    if row.stage in (B.NOT_BEFORE, B.RETRY_WAIT) and row.until is not None:
        if row.stage == B.RETRY_WAIT:
            words = f"retry in {seconds(max(0.0, row.until - now))}"
        else:
            words = f"waiting until {clock_time(row.until)} (not-before)"
        return Text(words, style="yellow", no_wrap=True, overflow="ellipsis")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(row.stage, style="cyan" if row.stage in B.ACTIVE else "dim")
    detail = short_gpu_names(console_line(row.detail))
    if row.stage == "renting" and row.usd_per_hour is not None:
        # The price first: at 80 columns the cell is cut at its end, never mid-price.
        text.append(f" {rate(row.usd_per_hour)}/h {detail}".rstrip())
    elif detail:
        text.append(" " + detail)
    if row.stage in B.ACTIVE and row.stage_since is not None and row.stage != "running":
        text.append(f" {ticking(now - row.stage_since)}", style="dim")
    if row.progress:
        text.append(" ▸ " + row.progress, style="dim")
    return text
