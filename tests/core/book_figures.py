"""Figures on the server book's shape, for planning its refactor (not a test):

    python -m tests.core.book_figures

- reach-ins: reads and writes of another part's data (what it assigns on self),
  `self._fleet.servers` or through a local alias (`fleet.servers`, `jobs.waiting`), in core/
  outside the modules that own the data (Fleet in fleet.py, KnownJobs in known_jobs.py,
  Budget in budget.py); and the same among every part of the book (Ends, Hedger, Warmth, ...
  too), a part's own file not counted;
- reads through what an owner exposes (a property, read-only or a setting: `jobs.waiting`
  typed `Mapping`, which only KnownJobs changes; or an attribute typed read-only,
  `fleet.servers: Mapping[...]`), counted apart: not a reach-in, but still a read of its state;
- the methods of ServerBook and of its read-only view BookView, and how many of them are one
  `return` (reads passed through);
- the largest classes of runner/ (lines).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from pathlib import Path

RUNNER = Path(__file__).parents[2] / "runner"
CORE = RUNNER / "core"
OWNERS = {"fleet": ("fleet.py", "Fleet"), "jobs": ("known_jobs.py", "KnownJobs"),
          "budget": ("budget.py", "Budget")}  # fmt: skip
# Every part of the book, by the name the others hold it under (`self._ends`, `ends`).
PARTS = {**OWNERS, "ends": ("ends.py", "Ends"), "hedger": ("hedging.py", "Hedger"),
         "warmth": ("warmth.py", "Warmth"), "renter": ("renting.py", "Renter"),
         "placer": ("placement.py", "Placement"), "giver": ("giving_back.py", "GiveBack"),
         "ahead": ("ahead.py", "RentAhead")}  # fmt: skip


def _class(path: Path, name: str) -> ast.ClassDef:
    found = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
    return next(n for n in found if n.name == name)


READ_ONLY = {"Mapping", "Set", "AbstractSet", "Sequence"}  # what mypy lets no caller change


def data_of(path: Path, name: str) -> set[str]:
    """What the class keeps: attributes assigned on self, and annotated fields; not those it
    exposes typed read-only (`self.servers: Mapping[...] = self._servers`)."""
    kept = set()
    for node in ast.walk(_class(path, name)):
        mine = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if mine and isinstance(node.ctx, ast.Store) and node.value.id == "self":
            kept.add(node.attr)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            kept.add(node.target.id)
    return kept - read_only_of(path, name)


def read_only_of(path: Path, name: str) -> set[str]:
    """Attributes the class assigns on self typed read-only (Mapping, Set, Sequence)."""
    found = set()
    for node in ast.walk(_class(path, name)):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Attribute):
            continue
        kind = node.annotation
        kind = kind.value if isinstance(kind, ast.Subscript) else kind
        if isinstance(kind, ast.Name) and kind.id in READ_ONLY:
            found.add(node.target.attr)
    return found


def properties_of(path: Path, name: str) -> set[str]:
    """What the class exposes read-only: its properties, and attributes typed read-only."""
    found = read_only_of(path, name)
    for node in _class(path, name).body:
        decorated = isinstance(node, ast.FunctionDef) and node.decorator_list
        if decorated and any(isinstance(d, ast.Name) and d.id == "property" for d in decorated):
            found.add(node.name)
    return found


def reached(
    of: Callable[[Path, str], set[str]] = data_of,
    owners_of: dict[str, tuple[str, str]] = OWNERS,
) -> Counter[tuple[str, str, str]]:
    """Each (file, part, attribute) one part's module uses of another part's kept data."""
    data = {part: of(CORE / file, cls) for part, (file, cls) in owners_of.items()}
    by_file = {file: part for part, (file, _) in owners_of.items()}
    counts: Counter[tuple[str, str, str]] = Counter()
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            inner = node.value
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
                part = inner.attr.lstrip("_") if inner.value.id == "self" else ""
            else:
                part = inner.id if isinstance(inner, ast.Name) else ""
            if by_file.get(path.name) != part and node.attr in data.get(part, ()):
                counts[path.name, part, node.attr] += 1
    return counts


def reach_ins(
    of: Callable[[Path, str], set[str]] = data_of,
    owners_of: dict[str, tuple[str, str]] = OWNERS,
) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (file, _, _), n in reached(of, owners_of).items():
        counts[file] += n
    return counts


def pass_throughs(file: str = "servers.py", name: str = "ServerBook") -> tuple[int, int]:
    book = _class(CORE / file, name)
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
    every = reach_ins(data_of, PARTS)
    print(f"reach-ins among all the book's parts: {sum(every.values())}", dict(every))
    exposed = reach_ins(properties_of, PARTS)
    said = "reads through what the parts expose (properties, attributes typed read-only)"
    print(f"{said}: {sum(exposed.values())}", dict(exposed))
    for file, name in (("servers.py", "ServerBook"), ("book_view.py", "BookView")):
        methods, one = pass_throughs(file, name)
        print(f"{name}: {methods} methods, {one} of them a single return")
    for size, name, where in largest_classes():
        print(f"{size:5} {name} ({where})")
