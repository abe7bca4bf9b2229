"""`summary.md`: the summary dict rendered with the package's jinja2 template, and a clean cut.

The template only sees the summary dict, so `clore-run comment SUMMARY.json` renders the same
Markdown later from the JSON file alone.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from runner import untrusted
from runner.report.mermaid import gantt
from runner.report.timeline import build_timeline, records_from_summary

_ICONS = {
    "passed": "✅",
    "failed": "❌",
    "timed_out": "⏱️",
    "error": "⚠️",
    "skipped": "⏭️",
    "cancelled": "🚫",
    "interrupted": "⏹️",
}
_CELL_LIMIT = 200
_BACKTICKS = re.compile(r"`{3,}")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


TEMPLATES = Path(__file__).parent / "templates"
# summary.md.j2 compiled to Python by jinja2 (`write_compiled_templates`), shipped beside it:
# compiling it took longer than writing every other report of a 200-job run. Used only while
# the stamp says it was made from this very template by this version of jinja2; otherwise the
# template is compiled from its source, as before.
COMPILED = TEMPLATES / "compiled"
_STAMP = COMPILED / "stamp.txt"
_TEMPLATE = "summary.md.j2"


def render_markdown(summary: Mapping[str, Any]) -> str:
    """Render `summary.md` from a summary dict (schema 1)."""
    return _environment().get_template(_TEMPLATE).render(s=summary)


def write_compiled_templates(target: Path = COMPILED) -> None:
    """Compile the template into `target` with its stamp. Run after changing the template or
    jinja2 (tests/report/test_summary.py says so when the shipped one is stale)."""
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("tmpl_*.py"):
        old.unlink()
    _environment(compiled=False).compile_templates(
        str(target), zip=None, filter_func=lambda name: name == _TEMPLATE, ignore_errors=False
    )
    (target / _STAMP.name).write_text(_stamp() + "\n", encoding="utf-8")


def compiled_is_current(target: Path = COMPILED) -> bool:
    try:
        return (target / _STAMP.name).read_text(encoding="utf-8").strip() == _stamp()
    except OSError:
        return False


def _stamp() -> str:
    digest = hashlib.sha256((TEMPLATES / _TEMPLATE).read_bytes()).hexdigest()
    return f"{_TEMPLATE} sha256 {digest} jinja2 {jinja2.__version__}"


def _environment(*, compiled: bool = True) -> jinja2.Environment:
    loader: jinja2.BaseLoader = jinja2.PackageLoader("runner.report", "templates")
    if compiled and compiled_is_current():
        loader = jinja2.ChoiceLoader([jinja2.ModuleLoader(COMPILED), loader])
    env = jinja2.Environment(
        loader=loader,
        autoescape=False,  # Markdown, not HTML: cells are escaped by the `cell` filter instead
        undefined=jinja2.StrictUndefined,  # a typo in the template fails the tests, not silently
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        cell=cell, money=money, rate=rate, duration=duration, pct=pct, icon=icon, fence=fence
    )
    env.filters["html_text"] = html_text
    # Text a server could have written (GPU and host names, reasons, test names and messages):
    # no link, image, HTML, mention or table break of its own; links only where we make them.
    env.filters["remote"] = lambda value, limit=_CELL_LIMIT: untrusted.markdown(str(value), limit)
    env.filters["human"] = human
    env.filters["gantt"] = summary_gantt
    return env


def summary_gantt(summary: Mapping[str, Any]) -> str:
    """The run's timeline as Mermaid source, "" when nothing ran."""
    model = build_timeline(records_from_summary(summary))
    return gantt(model, str(summary.get("pipeline", {}).get("name", "")))


def cell(value: object, limit: int = _CELL_LIMIT) -> str:
    """Text safe inside a Markdown table cell or list item: one line, no table or HTML breakers."""
    text = " ".join(str(value).split())  # newlines would end the table row
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def html_text(value: object, limit: int = _CELL_LIMIT) -> str:
    """Text inside an HTML element (`<summary>`): one line, HTML-escaped. Markdown is not read
    there, so the `cell` escapes (`\\|`) would show as they are."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)


def money(value: object) -> str:
    """$0.0124, $12.50: below $10 four decimals, so fractions of a cent of GPU time show."""
    if not isinstance(value, (int, float)):
        return "–"
    if value == 0:
        return "$0.00"
    return f"${value:.4f}" if abs(value) < 10 else f"${value:.2f}"


def rate(value: object) -> str:
    """An hourly price: $0.72, $0.045 (three decimals below ten cents)."""
    if not isinstance(value, (int, float)):
        return "–"
    return f"${value:.3f}" if abs(value) < 0.1 else f"${value:.2f}"


def human(status: object) -> str:
    """`timed_out` -> `timed out`."""
    return str(status).replace("_", " ")


def duration(value: object) -> str:
    """12.3s, 4m 05s, 2h 03m."""
    if not isinstance(value, (int, float)):
        return "–"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def pct(value: object) -> str:
    """+38%, -5%, ±0%; "new" when there was nothing to compare with."""
    if not isinstance(value, (int, float)):
        return "new"
    if round(value) == 0:
        return "±0%"
    return f"{value:+.0f}%"


def icon(status: object) -> str:
    return _ICONS.get(str(status), "❔")


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


@dataclass(frozen=True)
class _Blocks:
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
