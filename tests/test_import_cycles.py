"""runner/ has no import cycles, function-level imports included (design §1).

An edge A -> B for every `import B` / `from B import x` in A (x a submodule: B.x) at any depth of
A's code, and to the packages B's import runs first; imports under `if TYPE_CHECKING:` are left
out (they never run). A cycle is a strongly connected group of two or more modules.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

RUNNER = Path(__file__).parents[1] / "runner"


def _modules() -> dict[str, Path]:
    found = {}
    for path in RUNNER.rglob("*.py"):
        parts = list(path.relative_to(RUNNER.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if modules[module].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if isinstance(test, (ast.Name, ast.Attribute)) and "TYPE_CHECKING" in ast.unparse(test):
                todo.extend(child.orelse)  # type: ignore[union-attr]
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            todo.append(child)
    return found


@functools.cache  # one parse of runner/ for every test that reads the graph; none changes it
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(module, node, modules):
                parts = target.split(".")
                for k in range(2, len(parts) + 1):  # a.b.c runs a.b first
                    up = ".".join(parts[:k])
                    inside = module.startswith(up + ".")  # its own package: loaded already
                    if up in modules and up != module and (up == target or not inside):
                        edges[module].add(up)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected groups of two or more, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(edges[root])))]
        while work:
            node, pending = work[-1]
            for nxt in pending:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def test_runner_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_a_cycle_is_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
