"""The job graph on small hand-checked graphs, and on 10,000-job chains and fan-outs."""

from __future__ import annotations

import itertools

import pytest

from runner.core.graph import (
    CycleError,
    ancestors,
    critical_path,
    dependents_of,
    find_cycle,
    topological_order,
    upward_ranks,
    waves,
)

# a -> b -> d and a -> c -> d
DIAMOND: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
DIAMOND_MINUTES = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}
N = 10_000


def minutes(node: str) -> float:
    return DIAMOND_MINUTES[node]


def one(_: str) -> float:
    return 1.0


def assert_execution_order(cycle: list[str], needs: dict[str, list[str]]) -> None:
    """Each node of the cycle runs before the next: the next one needs it."""
    assert cycle[0] == cycle[-1]
    for before, after in itertools.pairwise(cycle):
        assert before in needs[after], (before, after)


# -- small graphs ------------------------------------------------------------------------------


def test_dependents_invert_needs_in_given_order() -> None:
    assert dependents_of(DIAMOND) == {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}


def test_topological_order_of_a_diamond() -> None:
    assert topological_order(DIAMOND) == ["a", "b", "c", "d"]


def test_topological_order_puts_needs_first_and_keeps_file_order_on_ties() -> None:
    needs = {"report": ["test"], "c": [], "test": ["build"], "a": [], "build": []}
    assert topological_order(needs) == ["c", "a", "build", "test", "report"]


def test_empty_graph() -> None:
    assert topological_order({}) == []
    assert waves({}) == []
    assert critical_path({}, one) == ([], 0.0)
    assert find_cycle({}) is None


def test_waves_of_a_diamond_and_file_order_within_a_wave() -> None:
    assert waves(DIAMOND) == [["a"], ["b", "c"], ["d"]]
    # z and a share wave 1 in file order, although m sits between them in the file
    assert waves({"z": [], "m": ["z"], "a": [], "q": ["m", "a"]}) == [["z", "a"], ["m"], ["q"]]


def test_a_wave_is_one_after_the_latest_need_not_the_first() -> None:
    # late needs both the first job and the third of a chain: it belongs after the chain
    needs = {"j1": [], "j2": ["j1"], "j3": ["j2"], "late": ["j1", "j3"]}
    assert waves(needs) == [["j1"], ["j2"], ["j3"], ["late"]]


def test_upward_ranks_are_the_longest_path_to_the_end() -> None:
    assert upward_ranks(DIAMOND, minutes) == {"d": 1.0, "b": 6.0, "c": 3.0, "a": 7.0}


def test_critical_path_of_a_diamond_follows_the_long_branch() -> None:
    assert critical_path(DIAMOND, minutes) == (["a", "b", "d"], 7.0)
    shorter_b = {**DIAMOND_MINUTES, "b": 0.5}
    assert critical_path(DIAMOND, shorter_b.__getitem__) == (["a", "c", "d"], 4.0)


def test_critical_path_starts_at_the_heaviest_root() -> None:
    needs: dict[str, list[str]] = {"small": [], "big": [], "end": ["small"], "solo": []}
    cost = {"small": 1.0, "big": 10.0, "end": 3.0, "solo": 2.0}
    assert critical_path(needs, cost.__getitem__) == (["big"], 10.0)
    cost["end"] = 9.5
    assert critical_path(needs, cost.__getitem__) == (["small", "end"], 10.5)


def test_ancestors_are_the_roots_and_everything_they_need() -> None:
    needs = {**DIAMOND, "x": [], "e": ["c"]}
    assert ancestors(needs, ["e"]) == {"e", "c", "a"}
    assert ancestors(needs, ["d", "x"]) == {"a", "b", "c", "d", "x"}
    assert ancestors(needs, []) == set()


def test_no_cycle_in_a_dag() -> None:
    assert find_cycle(DIAMOND) is None


def test_two_job_cycle_in_execution_order() -> None:
    needs = {"build": ["test"], "test": ["build"]}
    assert find_cycle(needs) == ["build", "test", "build"]


def test_cycle_behind_a_tail_lists_only_the_cycle_in_execution_order() -> None:
    needs = {"x": [], "a": ["x", "c"], "b": ["a"], "c": ["b"], "y": ["c"]}
    cycle = find_cycle(needs)
    assert cycle == ["a", "b", "c", "a"]
    assert_execution_order(cycle, needs)


def test_self_loop_is_a_cycle() -> None:
    assert find_cycle({"ok": [], "a": ["a"]}) == ["a", "a"]


def test_topological_order_raises_the_cycle() -> None:
    needs = {"x": [], "a": ["x", "c"], "b": ["a"], "c": ["b"]}
    with pytest.raises(CycleError) as info:
        topological_order(needs)
    assert info.value.cycle == ["a", "b", "c", "a"]
    assert str(info.value) == "a -> b -> c -> a"
    with pytest.raises(CycleError):
        waves(needs)
    with pytest.raises(CycleError):
        critical_path(needs, one)


# -- 10,000 jobs: iterative everywhere (a recursive DFS would hit the recursion limit) -----------


def chain(n: int) -> dict[str, list[str]]:
    return {f"j{i}": [f"j{i - 1}"] if i else [] for i in range(n)}


def test_chain_of_ten_thousand() -> None:
    needs = chain(N)
    order = topological_order(needs)
    assert order == [f"j{i}" for i in range(N)]
    grouped = waves(needs, order)
    assert len(grouped) == N
    assert grouped[-1] == [f"j{N - 1}"]
    path, length = critical_path(needs, one, order)
    assert path == order
    assert length == float(N)
    ranks = upward_ranks(needs, one, order)
    assert ranks["j0"] == float(N)
    assert ranks[f"j{N - 1}"] == 1.0
    assert find_cycle(needs) is None
    assert len(ancestors(needs, [f"j{N - 1}"])) == N


def test_chain_of_ten_thousand_closed_into_a_cycle() -> None:
    needs = chain(N)
    needs["j0"] = [f"j{N - 1}"]
    cycle = find_cycle(needs)
    assert cycle is not None
    assert len(cycle) == N + 1
    assert cycle[:2] == ["j0", "j1"]
    assert cycle[-2:] == [f"j{N - 1}", "j0"]
    assert_execution_order(cycle, needs)
    with pytest.raises(CycleError):
        topological_order(needs)


def test_fan_out_and_fan_in_of_ten_thousand() -> None:
    middle = [f"m{i}" for i in range(N)]
    needs: dict[str, list[str]] = {"root": [], **{m: ["root"] for m in middle}, "sink": middle}
    order = topological_order(needs)
    assert order[0] == "root"
    assert order[-1] == "sink"
    assert waves(needs, order) == [["root"], middle, ["sink"]]

    def duration(node: str) -> float:  # m1234 takes 1234 s; root and sink 1 s
        return float(node[1:]) if node.startswith("m") else 1.0

    path, length = critical_path(needs, duration, order)
    assert path == ["root", f"m{N - 1}", "sink"]
    assert length == 1.0 + (N - 1) + 1.0
    assert upward_ranks(needs, duration, order)["m0"] == 1.0  # 0 s itself + the sink
    assert find_cycle(needs) is None
    assert ancestors(needs, ["sink"]) == set(needs)


def test_fan_out_of_ten_thousand_without_a_sink() -> None:
    needs: dict[str, list[str]] = {"root": [], **{f"m{i}": ["root"] for i in range(N)}}
    grouped = waves(needs)
    assert [len(w) for w in grouped] == [1, N]
    assert critical_path(needs, one) == (["root", "m0"], 2.0)
