"""Imports between runner's parts run one way (design §1):

    core  <-  stores  <-  backends  <-  spec  <-  engine  <-  serve / gh_runner  <-  cli  <-  launch

with the parts that sit beside the line:
- the base: runner's top-level modules that import nothing of runner but core and each other
  (clock, errors, redact, figures, …): anything may import them;
- `spec` above `backends`: a pipeline file's models accept the keys each backend declares in the
  registry (a new marketplace is one folder and one line), so spec reads backends, never back;
- `report` (the files a run writes) and `live` (the terminal's live view) beside the engine:
  they read core's records (`live` the backends' places too) and are written by the engine,
  serve, gh_runner and cli;
- `joblog` and `plan`, top-level modules that read backends: at the engine's level.

A part is a package under runner/ or a top-level module; an edge is any import, function-level
ones included, its package face included (`from runner.backends import x` reaches
runner/backends/__init__.py). A new edge against the line fails here naming the modules.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_import_cycles import _graph

RUNNER = Path(__file__).parents[1] / "runner"
BASE = "base"
ENGINE_LEVEL_MODULES = {"joblog": "engine", "plan": "engine"}
ENTRY_MODULES = {"launch": "launch", "__main__": "launch"}

_BELOW_BACKENDS = {"stores", "core", BASE}
_BELOW_ENGINE = {"spec", "backends", *_BELOW_BACKENDS}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    BASE: {"core"},
    "stores": {"core", BASE},
    "backends": _BELOW_BACKENDS,
    "spec": {"backends", *_BELOW_BACKENDS},
    "report": {"core", BASE},
    "live": {"backends", "core", BASE},
    "engine": {"report", "live", *_BELOW_ENGINE},
    "serve": {"engine", "report", "live", *_BELOW_ENGINE},
    "gh_runner": {"engine", "report", "live", *_BELOW_ENGINE},
    "cli": {"serve", "gh_runner", "engine", "report", "live", *_BELOW_ENGINE},
    "launch": {"cli", *_BELOW_ENGINE},
}


def part(module: str) -> str:
    """The part a module belongs to: its package under runner/, or for a top-level module its
    level (base unless named above)."""
    names = module.split(".")
    if len(names) == 1:
        return BASE  # runner/__init__.py
    if (RUNNER / names[1]).is_dir():
        return names[1]
    return ENGINE_LEVEL_MODULES.get(names[1]) or ENTRY_MODULES.get(names[1]) or BASE


def back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import from one part to another that ALLOWED does not list."""
    found = []
    for module, targets in sorted(graph.items()):
        here = part(module)
        for target in sorted(targets):
            there = part(target)
            if there != here and there not in ALLOWED[here]:
                found.append(f"{module} -> {target} ({here} may not import {there})")
    return found


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """Module-level imports counted between parts: the table of the layering."""
    counts: dict[tuple[str, str], int] = {}
    for module, targets in graph.items():
        for target in targets:
            key = (part(module), part(target))
            if key[0] != key[1]:
                counts[key] = counts.get(key, 0) + 1
    return counts


def test_every_package_is_placed() -> None:
    packages = {p.name for p in RUNNER.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(ALLOWED), packages - set(ALLOWED)


def test_imports_run_one_way() -> None:
    assert back_edges(_graph()) == []


def test_the_allowed_edges_have_no_cycle() -> None:
    """The line itself is a order: no part may reach itself through the parts it may import."""
    for start in ALLOWED:
        seen, todo = set(), list(ALLOWED[start])
        while todo:
            nxt = todo.pop()
            assert nxt != start, f"{start} reaches itself"
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(ALLOWED[nxt])


def test_a_back_edge_is_named_a_face_included() -> None:
    graph = {
        "runner.core.graph": {"runner.core"},
        "runner.stores.ledger.rows": {"runner.core.model", "runner.core"},
        "runner.core.model": {"runner.backends"},  # core reaching up to a package's face
        "runner.backends.base": {"runner.engine.driver"},
    }
    assert back_edges(graph) == [
        "runner.backends.base -> runner.engine.driver (backends may not import engine)",
        "runner.core.model -> runner.backends (core may not import backends)",
    ]


if __name__ == "__main__":  # the table for a report: python -m tests.test_package_edges
    for (source, target), count in sorted(package_edges(_graph()).items()):
        print(f"{source:10} -> {target:10} {count:4}")
