"""Geometry of a submission's two pictures, drawn as SVG by the templates: its DAG (needs as
arrows, layers by longest path from a root) and its timeline (the reports' timeline model:
attempts as bars on a time axis, a lane per job).

Only numbers and the jobs' own fields come out of here; the templates escape every text.
Loops, no recursion: a 400-deep chain must lay out as a 4-wide one does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.report.timeline import AttemptRecord, build_timeline

NODE_W, NODE_H = 168, 30
GAP_X, GAP_Y = 56, 14
PAD = 12
LABEL_CHARS = 22  # what fits in a box; the full name is the box's tooltip


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    title: str
    status: str
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    path: str  # SVG path data
    status: str  # of the job the arrow comes from


@dataclass(frozen=True)
class Dag:
    nodes: list[Node]
    edges: list[Edge]
    outside: list[tuple[str, str]]  # (job, a need in another submission)
    width: float
    height: float


def dag(jobs: Sequence[tuple[str, str, str, Sequence[str]]]) -> Dag:
    """jobs: (id, name, status, needs), in submission order."""
    inside = {job_id for job_id, *_ in jobs}
    layer = _layers(jobs, inside)
    columns: dict[int, list[str]] = defaultdict(list)
    for job_id, *_ in jobs:
        columns[layer[job_id]].append(job_id)
    needs = {job_id: [n for n in ns if n in inside] for job_id, _, _, ns in jobs}
    _order_by_parents(columns, needs)
    place: dict[str, tuple[float, float]] = {}
    for col, ids in columns.items():
        for row, job_id in enumerate(ids):
            place[job_id] = (PAD + col * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y))
    status = {job_id: st for job_id, _, st, _ in jobs}
    nodes = [
        Node(job_id, _short(name), f"{name}: {job_id} ({st})", st, *place[job_id])
        for job_id, name, st, _ in jobs
    ]
    edges = [
        Edge(_arrow(place[need], place[job_id]), status[need])
        for job_id, ns in needs.items()
        for need in ns
    ]
    outside = [(job_id, n) for job_id, _, _, ns in jobs for n in ns if n not in inside]
    tallest = max((len(ids) for ids in columns.values()), default=0)
    return Dag(
        nodes=nodes,
        edges=edges,
        outside=outside,
        width=2 * PAD + max(1, len(columns)) * (NODE_W + GAP_X) - GAP_X,
        height=2 * PAD + max(1, tallest) * (NODE_H + GAP_Y) - GAP_Y,
    )


def _layers(
    jobs: Sequence[tuple[str, str, str, Sequence[str]]], inside: set[str]
) -> dict[str, int]:
    """Longest path from a root, by Kahn's order. A need in a cycle (the store never holds
    one, but a reader should not hang on it) leaves its jobs in layer 0."""
    children: dict[str, list[str]] = defaultdict(list)
    waiting: dict[str, int] = {}
    for job_id, _, _, ns in jobs:
        own = [n for n in ns if n in inside]
        waiting[job_id] = len(own)
        for need in own:
            children[need].append(job_id)
    layer = dict.fromkeys(waiting, 0)
    ready = [job_id for job_id, n in waiting.items() if n == 0]
    while ready:
        job_id = ready.pop()
        for child in children[job_id]:
            layer[child] = max(layer[child], layer[job_id] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return layer


def _order_by_parents(columns: dict[int, list[str]], needs: Mapping[str, list[str]]) -> None:
    """One barycentre pass, left to right: a job sits near the mean row of its needs, which
    removes most crossings in the DAGs people write (fan-out, fan-in, matrices)."""
    row: dict[str, int] = {}
    for col in sorted(columns):
        ids = columns[col]
        if col > 0:
            first = {job_id: i for i, job_id in enumerate(ids)}
            ids.sort(key=lambda j: _mean([row[n] for n in needs[j] if n in row], first[j]))
        for i, job_id in enumerate(ids):
            row[job_id] = i


def _mean(values: list[int], default: int) -> float:
    return sum(values) / len(values) if values else float(default)


def _arrow(start: tuple[float, float], end: tuple[float, float]) -> str:
    x1, y1 = start[0] + NODE_W, start[1] + NODE_H / 2
    x2, y2 = end[0] - 4, end[1] + NODE_H / 2  # the arrowhead ends at the box's edge
    mid = (x1 + x2) / 2
    return f"M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


# -- timeline ---------------------------------------------------------------------------------

BAR_H, BAR_GAP = 16, 6
LABEL_W = 180
CHART_W = 720
TICKS = 6


@dataclass(frozen=True)
class Bar:
    job_id: str
    number: int
    status: str  # setup (getting a place), running, or the span's outcome (timeline.SpanOutcome)
    title: str
    x: float
    y: float
    w: float


@dataclass(frozen=True)
class Timeline:
    rows: list[tuple[str, str, float]]  # (job id, label, y) in first-start order
    bars: list[Bar]
    ticks: list[tuple[float, str]]  # (x, "+12m")
    width: float
    height: float


def timeline(
    attempts: Sequence[Mapping[str, Any]],
    names: Mapping[str, str],
    now: float,
    allowed: Collection[str] = (),
) -> Timeline | None:
    """attempts: job_id, number, started_at, finished_at, failure; None when none started.
    Laid out by the reports' timeline model (lanes, phases, outcomes), so the page shows
    what summary.md and timeline.svg do; a running attempt ends at `now`. `allowed`: the jobs
    whose failure continue-on-error lets pass (drawn amber, as the reports draw them)."""
    if not attempts:
        return None
    running = {(a["job_id"], int(a["number"])) for a in attempts if a["finished_at"] is None}
    model = build_timeline(
        AttemptRecord(
            job_id=a["job_id"],
            job_name=names.get(a["job_id"], a["job_id"]),
            number=int(a["number"]),
            started_at=float(a["started_at"]),
            finished_at=float(a["finished_at"] if a["finished_at"] is not None else now),
            placed_at=a.get("placed_at"),
            failure=a["failure"],
            allowed=a["job_id"] in allowed,
        )
        for a in attempts
    )
    span = max(model.end_s, 1.0)
    scale = CHART_W / span
    lane = {job_id: float(PAD + i * (BAR_H + BAR_GAP)) for i, job_id in enumerate(model.jobs)}
    bars = []
    for part in model.spans:
        ongoing = (part.job_id, part.attempt) in running and part.phase == "run"
        status = "setup" if part.phase == "setup" else "running" if ongoing else part.outcome
        took = _duration(part.end_s - part.start_s)
        bars.append(
            Bar(
                job_id=part.job_id,
                number=part.attempt,
                status=status,
                title=f"{part.label}: {'running' if ongoing else part.phase}, {took}",
                x=LABEL_W + part.start_s * scale,
                y=lane[part.job_id],
                w=max(2.0, (part.end_s - part.start_s) * scale),
            )
        )
    ticks = [
        (LABEL_W + i * CHART_W / TICKS, "+" + _duration(i * span / TICKS)) for i in range(TICKS + 1)
    ]
    rows = [(job_id, _short(model.names[job_id]), y) for job_id, y in lane.items()]
    return Timeline(
        rows=rows,
        bars=bars,
        ticks=ticks,
        width=LABEL_W + CHART_W + 2 * PAD + 30,
        height=PAD * 2 + len(lane) * (BAR_H + BAR_GAP) + 20,
    )


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
