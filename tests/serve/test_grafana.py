"""docs/grafana/clore-run.json, the Grafana dashboard for GET /metrics, queries what the server
really writes, and shows all of it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runner.serve import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "clore-run.json"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _written() -> set[str]:
    """The sample names /metrics writes (a summary's _sum and _count included)."""
    text = metrics.render(
        {"queued": 1, "running": 2},
        {"wait_sum": 1.0, "wait_count": 1, "run_sum": 2.0, "run_count": 1, "spend": 0.5},
        0.25,
        1,
        {401: 3},
    )
    return {line.split("{")[0].split()[0] for line in text.splitlines() if not line.startswith("#")}


def _queries() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p["targets"]]


def test_every_metric_queried_is_written_and_every_one_written_is_shown() -> None:
    queried = {name for expr in _queries() for name in re.findall(r"clore_run_\w+", expr)}
    assert queried <= _written(), queried - _written()
    families = {re.sub(r"_(sum|count)$", "", name) for name in _written()}
    shown = {re.sub(r"_(sum|count)$", "", name) for name in queried}
    assert families == shown, families ^ shown


def test_queries_are_well_formed() -> None:
    for expr in _queries():
        for opening, closing in ("()", "{}", "[]"):
            depth = 0
            for char in expr:
                depth += (char == opening) - (char == closing)
                assert depth >= 0, expr
            assert depth == 0, expr
        assert 'job=~"$job"' in expr, expr  # every panel follows the scrape job chosen


def test_it_imports_with_a_data_source_chosen_at_import() -> None:
    board = _dashboard()
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]  # Grafana's grid is 24 wide
        assert panel["type"] in ("stat", "timeseries")
