"""The shipped workflows a user copies: every placeholder `uses:` (or pip install) of this
action is marked `# CHANGE:`, and the runner reaper fails loudly when it cannot run (a copied
reaper that quietly skipped left every orphaned runner billing)."""

from __future__ import annotations

from pathlib import Path

import yaml

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
PLACEHOLDER = "org/clore-gpu-action"


def test_every_placeholder_line_is_marked_change() -> None:
    unmarked = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if PLACEHOLDER in line and not any(
                "# CHANGE:" in x for x in lines[max(0, n - 2) : n + 1]
            ):
                unmarked.append(f"{path.name}:{n + 1}")
    assert unmarked == []


def test_the_reaper_fails_when_it_cannot_run() -> None:
    flow = yaml.safe_load((WORKFLOWS / "clore-runner-reaper.yml").read_text(encoding="utf-8"))
    steps = flow["jobs"]["reap"]["steps"]
    assert all("if" not in step for step in steps), (
        "a step skipped is a reaper that quietly did nothing"
    )
    check = steps[0]
    assert "exit 1" in check["run"] and "::error::" in check["run"]
    reap = steps[-1]
    assert reap["run"].strip() == "clore-run cleanup --runners"
    assert reap["env"]["CLORE_RUNNER_WORKFLOWS"] and reap["env"]["CLORE_RUNNER_MAX_HOURS"]
