"""The job graph: topological order, cycles, waves and critical paths.

Everything is iterative (no recursion), so a 10,000-deep chain works, and linear in V + E.
Graphs are given as `needs`: a mapping from a node to the nodes it depends on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence


class CycleError(ValueError):
    """The graph has a cycle; `cycle` lists it with the first node repeated at the end."""

    def __init__(self, cycle: list[str]) -> None:
        super().__init__(" -> ".join(cycle))
        self.cycle = cycle


def dependents_of(needs: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Invert `needs`: for each node, the nodes that need it (in the order they were given)."""
    dependents: dict[str, list[str]] = {node: [] for node in needs}
    for node, deps in needs.items():
        for dep in deps:
            dependents[dep].append(node)
    return dependents


def topological_order(
    needs: Mapping[str, Sequence[str]], dependents: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """Kahn's algorithm; ties keep the mapping's order. Raises CycleError naming a cycle.
    `dependents`: `dependents_of(needs)`, when the caller has it already."""
    indegree = {node: len(deps) for node, deps in needs.items()}
    if dependents is None:
        dependents = dependents_of(needs)
    queue = deque(node for node, count in indegree.items() if count == 0)
    order: list[str] = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for child in dependents[node]:
            indegree[child] -= 1
            if indegree[child] == 0:
                queue.append(child)
    if len(order) != len(indegree):
        raise CycleError(find_cycle(needs) or [])
    return order


def find_cycle(needs: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle as `[a, b, ..., a]`, or None. Iterative three-colour DFS.

    The path follows execution order: in `build -> test -> build`, test needs build and build
    needs test.
    """
    dependents = dependents_of(needs)
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(needs, white)
    for root in needs:
        if colour[root] != white:
            continue
        path: list[str] = [root]
        iters = [iter(dependents[root])]
        colour[root] = grey
        while iters:
            child = next(iters[-1], None)
            if child is None:
                colour[path.pop()] = black
                iters.pop()
                continue
            if colour[child] == grey:
                return [*path[path.index(child) :], child]
            if colour[child] == white:
                colour[child] = grey
                path.append(child)
                iters.append(iter(dependents[child]))
    return None


def waves(
    needs: Mapping[str, Sequence[str]], order: Iterable[str] | None = None
) -> list[list[str]]:
    """Group nodes into waves: a node's wave is one more than the latest wave it needs."""
    level: dict[str, int] = {}
    for node in order if order is not None else topological_order(needs):
        level[node] = 1 + max((level[d] for d in needs[node]), default=-1)
    grouped: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for node in needs:  # keep file order within a wave
        grouped[level[node]].append(node)
    return grouped


def upward_ranks(
    needs: Mapping[str, Sequence[str]],
    duration: Callable[[str], float],
    order: Sequence[str] | None = None,
    dependents: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, float]:
    """HEFT upward rank: a node's duration plus the longest rank among its dependents.

    This is the length of the longest path from the node's start to the end of the graph, the
    quantity list scheduling orders ready jobs by. `order` and `dependents`, when the caller
    has them already, save working them out again.
    """
    topo = order if order is not None else topological_order(needs)
    children = dependents if dependents is not None else dependents_of(needs)
    rank: dict[str, float] = {}
    for node in reversed(topo):
        below = children[node]
        rank[node] = duration(node) + (max([rank[c] for c in below]) if below else 0.0)
    return rank


def critical_path(
    needs: Mapping[str, Sequence[str]],
    duration: Callable[[str], float],
    order: Sequence[str] | None = None,
) -> tuple[list[str], float]:
    """The longest path through the graph (by `duration`) and its length."""
    topo = order if order is not None else topological_order(needs)
    if not topo:
        return [], 0.0
    rank = upward_ranks(needs, duration, topo)
    dependents = dependents_of(needs)
    node = max((n for n in topo if not needs[n]), key=lambda n: rank[n])
    path = [node]
    while dependents[node]:
        node = max(dependents[node], key=lambda n: rank[n])
        path.append(node)
    return path, rank[path[0]]


def ancestors(needs: Mapping[str, Sequence[str]], roots: Iterable[str]) -> set[str]:
    """The roots and everything they transitively need."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(needs[node])
    return seen
