"""No two classes of the core share a name: `Market` meant the boot history's verdict in one
module and the offers a book rents from in another, and a reader (or an import) took one for the
other."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

CORE = Path(__file__).parents[2] / "runner" / "core"


def test_every_core_class_name_is_its_own() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(path.name)
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
