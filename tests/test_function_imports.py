"""Every import inside a function says why it is not at the top of its module.

Imports at the top are the rule: they show what a module needs and fail at once. One inside a
function is for a library or module only some runs use (the PostgreSQL extra, uvicorn for
`serve`, rich for a terminal, a backend when it is built); its reason is a comment on its line,
on the line above, or above the first of a run of imports. A command module under runner/cli/
imports what the command runs when it runs: the CLI's modules load for every command, and
`--help` should not load a backend.

`python tests/test_function_imports.py` lists them all with their reasons.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

RUNNER = Path(__file__).parents[1] / "runner"
COMMANDS = RUNNER / "cli"
WHY_COMMANDS = "a command imports what it runs when it runs"


def function_imports(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, the import, its reason or "") for each import inside a function of `path`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    todo: list[tuple[ast.AST, bool]] = [(ast.parse("\n".join(lines)), False)]
    while todo:
        node, in_function = todo.pop()
        body = list(ast.iter_child_nodes(node))
        for child in body:
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # never runs
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child.lineno, ast.unparse(child), _reason(lines, child, body)
            inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            todo.append((child, in_function or inner))


def _reason(lines: list[str], node: ast.stmt, siblings: list[ast.AST]) -> str:
    """The comment on the import's line or the line above, or else the nearest such comment
    of an import before it in the same run (imports apart only by blank lines, as isort
    groups them)."""
    candidate: ast.stmt = node
    for before in [*reversed(siblings[: siblings.index(node)]), None]:
        own = _words(lines[candidate.lineno - 1].partition("#")[2])
        if own:
            return own
        above = lines[candidate.lineno - 2].strip() if candidate.lineno > 1 else ""
        if above.startswith("#"):
            return above[1:].strip()
        if not isinstance(before, (ast.Import, ast.ImportFrom)):
            return ""
        if any(line.strip() for line in lines[before.end_lineno or 0 : candidate.lineno - 1]):
            return ""
        candidate = before
    return ""


def _words(comment: str) -> str:
    """A comment less its linters' marks (`noqa: F401`, `type: ignore[...]`): a reason."""
    return re.sub(r"(noqa|type: ?ignore)(: ?[A-Z0-9, ]+|\[[^]]*\])?", "", comment).strip(" ()")


def all_function_imports() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(RUNNER.rglob("*.py")):
        for line, text, reason in function_imports(path):
            if not reason and path.is_relative_to(COMMANDS):
                reason = WHY_COMMANDS
            found.append((f"{path.relative_to(RUNNER.parent)}:{line}", text, reason))
    return found


def test_every_function_level_import_says_why() -> None:
    silent = [f"{where}: {text}" for where, text, reason in all_function_imports() if not reason]
    assert silent == [], "put the reason in a comment, or move the import to the top"


def test_a_silent_import_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n"
        "    import json\n"
        "    # the extra\n"
        "    import psycopg\n"
        "    import psycopg.rows\n"
        "\n"
        "    import runner.stores  # same run, after isort's blank line\n"
        "    import runner.spec\n"
        "\n"
        "def g():\n"
        "    import csv  # only for export\n"
        "\n"
        "def h():\n"
        "    import zlib  # noqa: F401\n"
    )
    found = [(text, reason) for _, text, reason in function_imports(module)]
    assert sorted(found) == [
        ("import csv", "only for export"),
        ("import json", ""),
        ("import psycopg", "the extra"),
        ("import psycopg.rows", "the extra"),
        ("import runner.spec", "same run, after isort's blank line"),
        ("import runner.stores", "same run, after isort's blank line"),
        ("import zlib", ""),  # a linter's mark is not a reason
    ]


if __name__ == "__main__":
    rows = all_function_imports()
    for where, text, reason in rows:
        print(f"{where}: {text}  # {reason or 'NO REASON'}")
    print(f"{len(rows)} function-level imports, {sum(not r for *_, r in rows)} without a reason")
