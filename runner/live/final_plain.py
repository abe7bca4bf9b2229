"""The end of a run as plain text (a CI log, a pipe), laid out as rich lays out
`runner.live.final.render_final` without colour, byte for byte, without importing rich: rich's
import was a tenth of what a `clore-run run` of short jobs cost, and a plain log needs none of
it. Only what can be laid out exactly is: text of single-cell characters, no tab or control
character, a totals line that does not wrap. For anything else `plain_final` answers None and
the caller draws with rich.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.live.final import (
    Column,
    _left_out,
    baseline_line,
    failed_log_lines,
    reports_line,
    shown_jobs,
    table_cells,
    totals_parts,
)

ELLIPSIS = "…"
# The characters the report itself writes beyond printable ASCII, each one cell wide.
_SINGLE_CELL_EXTRA = frozenset("…Δ–·")


def plain_final(summary: Mapping[str, Any], out_dir: Path, width: int) -> str | None:
    """The report, each line ending in a newline, at `width` cells; None when it holds text
    this module does not lay out as rich would."""
    shown = shown_jobs(summary["jobs"])
    columns, rows = table_cells(summary, shown)
    if not all(_simple(text) for row in rows for text, _ in row):
        return None
    table = _table(columns, [[text for text, _ in row] for row in rows], width)
    if table is None:
        return None
    lines = []
    if len(summary["jobs"]) > len(shown):
        lines.append(_left_out(summary["jobs"], shown))
    for kind, line in failed_log_lines(summary):
        lines.append(_cut(line, width) if kind == "line" else line)
    totals = "".join(text for text, _ in totals_parts(summary))
    if len(totals) > width:
        return None  # rich wraps it at word boundaries
    lines.append(totals)
    comparison = summary.get("comparison")
    if comparison:
        lines.append(baseline_line(comparison))
    lines.append(reports_line(out_dir))
    if not all(_simple(line) for line in lines):
        return None
    return "".join(line + "\n" for line in ["", *table, *lines])


def _simple(text: str) -> bool:
    """Every character one cell wide and printed as it is (rich drops some control characters,
    expands tabs, measures wide and zero-width ones)."""
    return (text.isascii() and text.isprintable()) or all(
        (" " <= c <= "~") or c in _SINGLE_CELL_EXTRA for c in text
    )


def _cut(text: str, width: int) -> str:
    """As rich cuts a no-wrap text with overflow "ellipsis"."""
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def _table(columns: Sequence[Column], rows: list[list[str]], width: int) -> list[str] | None:
    """rich's Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False) of one-line cells with
    padding (0, 1): its lines, or None where its layout is not followed here. A header of a
    column that gives way is one word, so rich cuts it as it cuts a cell rather than wrap it."""
    n = len(columns)
    if n < 2:
        return None
    pads = [(0 if i == 0 else 1, 0 if i == n - 1 else 1) for i in range(n)]
    texts = [[c.header for c in columns], *rows]
    longest = [max(len(row[i]) for row in texts) for i in range(n)]
    max_width = width - (n - 1)  # one space between columns

    def measure(i: int, limit: int) -> int | None:
        """Column i's width measured within `limit` cells, as rich measures it."""
        pad = sum(pads[i])
        if limit - pad < 1:
            return None  # rich measures such a column otherwise
        return _clamp(min(longest[i], limit - pad) + pad, columns[i], pad)

    widths = [measure(i, max_width) for i in range(n)]
    if None not in widths and sum(widths) > max_width:  # type: ignore[arg-type]
        # rich narrows the columns that give way first, then takes what is still too much
        # from every column evenly, then measures each again within its new width (a minimum
        # width takes back what it lost; a column left with no room is dropped, which is left
        # to rich).
        start = [w for w in widths if w is not None]
        reduced = _collapse_widths(start, [c.gives_way for c in columns], max_width)
        if sum(reduced) > max_width:
            reduced = _ratio_reduce(sum(reduced) - max_width, [1] * n, reduced, reduced)
        widths = [measure(i, limit) for i, limit in enumerate(reduced)]
    if None in widths:
        return None
    return _lines(texts, columns, [w for w in widths if w is not None], pads)


def _lines(
    texts: list[list[str]],
    columns: Sequence[Column],
    widths: list[int],
    pads: list[tuple[int, int]],
) -> list[str] | None:
    n = len(columns)
    if any(w - sum(p) < 1 for w, p in zip(widths, pads, strict=True)):
        return None
    lines = [_row(texts[0], columns, widths, pads)]
    lines.append("─" * (sum(widths) + n - 1))
    lines.extend(_row(row, columns, widths, pads) for row in texts[1:])
    return lines


def _clamp(measured: int, column: Column, pad: int) -> int:
    """A column's width as rich clamps its measured maximum to its min and max width."""
    if column.min_width is not None:
        measured = max(measured, column.min_width + pad)
    if column.max_width is not None:
        measured = min(measured, column.max_width + pad)
    return measured or 1


def _row(
    cells: Sequence[str],
    columns: Sequence[Column],
    widths: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> str:
    out = []
    for text, column, width, (left, right) in zip(cells, columns, widths, pads, strict=True):
        inner = width - left - right
        if column.justify == "right":
            text = _cut(text.rstrip(), inner)
            text = " " * (inner - len(text)) + text
        else:
            text = _cut(text, inner).ljust(inner)
        out.append(" " * left + text + " " * right)
    return " ".join(out)


def _collapse_widths(widths: list[int], gives_way: list[bool], max_width: int) -> list[int]:
    """rich's Table._collapse_widths, step for step: the widest columns that give way are
    narrowed to the next widest, and so on, until the table fits or they have no room left."""
    excess = sum(widths) - max_width
    while any(gives_way) and excess > 0:
        widest = max(w for w, gives in zip(widths, gives_way, strict=True) if gives)
        next_widest = max(
            (w for w, gives in zip(widths, gives_way, strict=True) if gives and w != widest),
            default=0,
        )
        ratios = [int(gives and w == widest) for w, gives in zip(widths, gives_way, strict=True)]
        if not widest - next_widest:
            break
        most = [min(excess, widest - next_widest)] * len(widths)
        widths = _ratio_reduce(excess, ratios, most, widths)
        excess = sum(widths) - max_width
    return widths


def _ratio_reduce(
    total: int, ratios: list[int], maximums: list[int], values: list[int]
) -> list[int]:
    """rich._ratio.ratio_reduce, step for step (its rounding included)."""
    ratios = [ratio if maximum else 0 for ratio, maximum in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    total_remaining = total
    result = []
    for ratio, maximum, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            distributed = min(maximum, round(ratio * total_remaining / total_ratio))
            result.append(value - distributed)
            total_remaining -= distributed
            total_ratio -= ratio
        else:
            result.append(value)
    return result
