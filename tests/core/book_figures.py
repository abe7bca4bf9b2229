"""Figures on the server book's shape, for planning its refactor (not a test):

    python -m tests.core.book_figures

- reach-ins: reads and writes of another part's data, `self._fleet.servers` or through a local
  alias (`fleet.servers`, `jobs.waiting`), in core/ outside the modules that own the data
  (Fleet in fleet.py, KnownJobs in known_jobs.py, Budget in budget.py);
- ServerBook's methods, and how many of them are one `return` (reads passed through);
- the largest classes of runner/ (lines).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

RUNNER = Path(__file__).parents[2] / "runner"
CORE = RUNNER / "core"
OWNERS = {"fleet": ("fleet.py", "Fleet"), "jobs": ("known_jobs.py", "KnownJobs"),
          "budget": ("budget.py", "Budget")}  # fmt: skip


def _class(path: Path, name: str) -> ast.ClassDef:
    found = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
    return next(n for n in found if n.name == name)


def data_of(path: Path, name: str) -> set[str]:
    """What the class keeps: attributes assigned on self, and annotated fields."""
    kept = set()
    for node in ast.walk(_class(path, name)):
        mine = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if mine and isinstance(node.ctx, ast.Store) and node.value.id == "self":
            kept.add(node.attr)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            kept.add(node.target.id)
    return kept


def reach_ins() -> Counter[str]:
    data = {part: data_of(CORE / file, cls) for part, (file, cls) in OWNERS.items()}
    owners = {file for file, _ in OWNERS.values()}
    counts: Counter[str] = Counter()
    for path in sorted(CORE.glob("*.py")):
        if path.name in owners:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            inner = node.value
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
                part = inner.attr.lstrip("_") if inner.value.id == "self" else ""
            else:
                part = inner.id if isinstance(inner, ast.Name) else ""
            if node.attr in data.get(part, ()):
                counts[path.name] += 1
    return counts


def pass_throughs() -> tuple[int, int]:
    book = _class(CORE / "servers.py", "ServerBook")
    methods = [m for m in book.body if isinstance(m, ast.FunctionDef)]
    one = 0
    for method in methods:
        body = [s for s in method.body if not isinstance(s, ast.Expr)]
        one += len(body) == 1 and isinstance(body[0], ast.Return)
    return len(methods), one


def largest_classes(top: int = 12) -> list[tuple[int, str, str]]:
    rows = []
    for path in RUNNER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                rows.append((size, node.name, str(path.relative_to(RUNNER.parent))))
    return sorted(rows, reverse=True)[:top]


if __name__ == "__main__":
    counts = reach_ins()
    print(f"reach-ins into Fleet/KnownJobs/Budget data: {sum(counts.values())}", dict(counts))
    methods, one = pass_throughs()
    print(f"ServerBook: {methods} methods, {one} of them a single return")
    for size, name, where in largest_classes():
        print(f"{size:5} {name} ({where})")
