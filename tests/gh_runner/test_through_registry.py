"""`runner start` gets its backend from the registry, as `run` and `serve` do: gh_runner names
no marketplace, and a backend that cannot host runners is refused (exit 2) before anything is
built, read or registered."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.registry import BACKENDS, runner_hosting
from runner.cli.gh_runner import register
from runner.errors import UsageError
from runner.gh_runner.wiring import Wiring
from tests.test_import_cycles import _graph

CLORE = "runner.backends.clore"
# The give-back from a record (`runner stop`, `cleanup --runners`): proving an order ours,
# cancelling and billing it from the record alone, still Clore's own code in gh_runner; start,
# its hand-over and its wiring name no backend.
STOP_SIDE = {
    "runner.gh_runner.reap",
    "runner.gh_runner.reap_cmd",
    "runner.gh_runner.release",
    "runner.gh_runner.stop",
}


def clore_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from runner/gh_runner/ into the Clore backend, function-level and
    type-checking ones included."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if module.startswith("runner.gh_runner")
        for target in sorted(targets)
        if target == CLORE or target.startswith(CLORE + ".")
    ]


def test_gh_runner_imports_no_backend_of_its_own() -> None:
    graph = {m: t for m, t in _graph().items() if m not in STOP_SIDE}
    assert clore_imports(graph) == []


def test_an_import_of_clore_from_gh_runner_is_named() -> None:
    graph = {
        "runner.gh_runner.start": {"runner.backends.clore.provision", "runner.backends.base"},
        "runner.gh_runner.wiring": {"runner.backends.clore"},
        "runner.engine.driver": {"runner.backends.clore.api"},
    }
    assert clore_imports(graph) == [
        "runner.gh_runner.start -> runner.backends.clore.provision",
        "runner.gh_runner.wiring -> runner.backends.clore",
    ]


def test_every_backend_that_hosts_runners_is_found_and_the_others_are_refused() -> None:
    assert runner_hosting("clore") is BACKENDS["clore"].runner_host
    with pytest.raises(UsageError) as refused:
        runner_hosting("local")
    assert str(refused.value) == (
        "--backend local: this backend cannot host GitHub runners (backends that can: clore)"
        " (pass --backend clore)"
    )


@pytest.mark.parametrize(
    ("backend", "said"),
    [
        ("ssh", "--backend ssh: this backend cannot host GitHub runners"),
        ("nope", "--backend nope: no such backend"),
    ],
)
def test_runner_start_on_a_backend_that_cannot_host_runners_exits_2(
    backend: str, said: str
) -> None:
    built: list[str] = []

    def client() -> Any:
        built.append("client")
        raise AssertionError("no client is built for a refused backend")

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI, so `runner` stays a command group."""

    env = {"CLORE_RUNNER_TOKEN": "t0ken-abcdef", "GITHUB_REPOSITORY": "octo/repo"}
    register(app, Wiring(client=client, env=env))
    result = CliRunner().invoke(app, ["runner", "start", "--gpu", "3090", "--backend", backend])
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output
    assert built == []
