"""`runner start|stop` and the reaper get their backend from the registry, as `run` and `serve`
do: gh_runner names no marketplace, and a backend that cannot host runners is refused (exit 2)
before anything is built, read or registered."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.registry import BACKENDS, runner_hosting
from runner.cli.gh_runner import register
from runner.core.model import GpuAsk
from runner.errors import JobCannotRun, UsageError
from runner.gh_runner.github import JitConfig, Registration
from runner.gh_runner.start import StartRequest, StartTools, start_runners
from runner.gh_runner.wiring import Wiring
from tests.fakes.fake_clock import FakeClock
from tests.test_import_cycles import _graph

CLORE = "runner.backends.clore"


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
    assert clore_imports(_graph()) == []


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


class _Host:
    """A runner host that refuses at one step: start reaches the backend only through it."""

    def __init__(self, refuse: str) -> None:
        self.refuse = refuse
        self.calls: list[str] = []
        self.seat: object = "unset"

    def join(self, seat: object) -> None:
        self.calls.append("join")
        self.seat = seat

    def check_offers(self, job: Any, runners: int) -> None:
        self.calls.append(f"offers {job.gpu.type} x{runners} {job.timeout_s:g}s")
        if self.refuse == "offers":
            raise JobCannotRun("1 servers fit 3090, 2 runners were asked for")

    def check_budget(self, job: Any, runners: int, budget_usd: float | None) -> None:
        self.calls.append(f"budget {budget_usd}")
        if self.refuse == "budget":
            raise JobCannotRun("no offer left within the budget")

    def close(self) -> None:
        self.calls.append("close")


class _GitHub:
    scope = None

    def __init__(self) -> None:
        self.live: set[int] = set()

    def generate_jitconfig(self, name: str, labels: list[str], group_id: int) -> Registration:
        runner_id = len(self.live) + 1
        self.live.add(runner_id)
        return Registration(runner_id, name, JitConfig("c2VjcmV0"))

    def delete_runner(self, runner_id: int) -> bool:
        self.live.discard(runner_id)
        return True


@pytest.mark.parametrize(
    ("refuse", "calls"),
    [
        ("offers", ["join", "offers 3090 x2 600s", "close"]),
        ("budget", ["join", "offers 3090 x2 600s", "budget 1.5", "close"]),
    ],
)
def test_a_refusal_of_the_runner_host_closes_it_and_leaves_no_registration(
    refuse: str, calls: list[str]
) -> None:
    host, github = _Host(refuse), _GitHub()
    tools = StartTools(host=host, clock=FakeClock(), github=github, seat=None)  # type: ignore[arg-type]
    request = StartRequest(
        ask=GpuAsk(type="3090"), max_minutes=10.0, run_id="r1", runners=2, budget_usd=1.5
    )
    said: list[str] = []
    with pytest.raises(JobCannotRun):
        start_runners(request, tools, threading.Event(), said.append)
    assert host.calls == calls and host.seat is None
    assert github.live == set()  # the budget's refusal came after both were registered
    assert len(said) == (2 if refuse == "budget" else 0)
