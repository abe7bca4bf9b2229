"""No class of the core is over 300 lines: one that grows past that holds two ideas (the
server book and the scheduler each did), and is split by what each part owns."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).parents[2] / "runner" / "core"
MOST_LINES = 300


def test_no_core_class_is_over_300_lines() -> None:
    sizes = {}
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert sizes  # the walk found the core
    assert {where: n for where, n in sizes.items() if n > MOST_LINES} == {}
