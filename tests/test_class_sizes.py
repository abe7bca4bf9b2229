"""No class in runner/ is over 400 lines (the core's own test holds its classes to 300): one
that grows past that holds two jobs (the provisioner, the Clore backend, the client and the
driver each did), and is split by responsibility into modules with one job each."""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).parents[1] / "runner"
MOST_LINES = 400


def test_no_class_is_over_400_lines() -> None:
    sizes = {}
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                where = f"{path.relative_to(RUNNER)}:{node.name}"
                sizes[where] = node.end_lineno - node.lineno + 1
    assert len(sizes) > 100  # the walk found the package
    assert {where: n for where, n in sizes.items() if n > MOST_LINES} == {}
