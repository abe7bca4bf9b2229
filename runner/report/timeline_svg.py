"""The timeline as a standalone SVG (timeline.svg), for places that do not draw Mermaid: a lane
per job, grey for getting a place (renting, booting), and a run in its outcome's colour
(runner.outcome: green passed, red failed, orange timed out, amber allowed to fail), light red
for an attempt that was retried. Every text is XML-escaped; a hover shows each bar's times."""

from __future__ import annotations

from runner import outcome as O
from runner.figures import duration
from runner.report.text import escape_text as escape
from runner.report.timeline import Span, Timeline

LABEL_W = 180
CHART_W = 640
ROW_H = 22
TOP = 40
_COLOURS = {
    "setup": O.SETUP_HEX,
    "passed": O.outcome("passed").colour,
    "failed": O.outcome("failed").colour,
    "timed_out": O.outcome("timed_out").colour,
    "allowed": O.outcome("failed", allowed=True).colour,
    "retried": O.RETRIED_HEX,
}
LEGEND = (
    ("setup", "renting / booting"),
    ("passed", O.status_words("passed")),
    ("failed", O.status_words("failed")),
    ("timed_out", O.status_words("timed_out")),
    ("allowed", "failed" + O.ALLOWED),
    ("retried", "failed, retried"),
)
_NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800)


def render_svg(timeline: Timeline, title: str = "") -> str:
    lanes = {job: i for i, job in enumerate(timeline.jobs)}
    height = TOP + ROW_H * max(1, len(lanes)) + 30
    width = LABEL_W + CHART_W + 20
    scale = CHART_W / max(timeline.end_s, 1.0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title or "timeline")}'
        f" · {escape(duration(timeline.end_s))}</text>",
    ]
    out += _axis(timeline.end_s, scale, TOP + ROW_H * len(lanes))
    for job, lane in lanes.items():
        y = TOP + lane * ROW_H
        name = timeline.names.get(job, job)
        out.append(f'<text x="8" y="{y + 15}">{escape(_clip(name, 26))}</text>')
    for span in timeline.spans:
        out.append(_bar(span, TOP + lanes[span.job_id] * ROW_H, scale))
    out += _legend(height - 10)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _bar(span: Span, y: int, scale: float) -> str:
    colour = _COLOURS["setup" if span.phase == "setup" else span.outcome]
    x = LABEL_W + span.start_s * scale
    w = max(1.0, (span.end_s - span.start_s) * scale)
    what = "getting a place" if span.phase == "setup" else "running"
    tip = (
        f"{span.label}: {what}, {duration(span.end_s - span.start_s)} from {duration(span.start_s)}"
    )
    return (
        f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{ROW_H - 8}" rx="2" '
        f'fill="{colour}"><title>{escape(tip)}</title></rect>'
    )


def _axis(end_s: float, scale: float, bottom: int) -> list[str]:
    step = next((s for s in _NICE_STEPS_S if end_s / s <= 8), _NICE_STEPS_S[-1])
    out = []
    tick = 0
    while tick <= end_s + 1e-9:
        x = LABEL_W + tick * scale
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#eaeef2"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{TOP - 8}" fill="#57606a" text-anchor="middle">'
            f"{escape(_tick(tick))}</text>"
        )
        tick += step
    return out


def _legend(y: int) -> list[str]:
    out, x = [], 8
    for key, words in LEGEND:
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{_COLOURS[key]}"/>')
        out.append(f'<text x="{x + 16}" y="{y}">{words}</text>')
        x += 30 + 7 * len(words)
    return out


def _tick(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m" + (f"{seconds % 60:02d}" if seconds % 60 else "")
    return f"{seconds // 3600}h" + (f"{seconds % 3600 // 60:02d}" if seconds % 3600 else "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
