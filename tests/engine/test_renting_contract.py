"""What a run says of a renting backend's servers at its end, read through the backend
contract (RentingBackend): the servers given back with what each cost as billed, and the
orders that may be ours and were not proven (exit 3)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from runner.backends.base import GivenBack, RentingBackend, Unproven
from runner.core.model import Job
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from tests.fakes.passing_backend import PassingBackend

PIPELINE = "jobs:\n  a: {run: 'true', workspace: false}\n"


class Renting(PassingBackend):
    """Every job passes; the backend says what it gave back and left unproven."""

    name = "renting"
    where = "rented"

    def __init__(self, given: Sequence[GivenBack], unproven: Sequence[Unproven] = ()) -> None:
        self._given = tuple(given)
        self._unproven = tuple(unproven)

    def set_pending(self, jobs: Sequence[Job]) -> None:
        return None

    def stop_soon(self) -> None:
        return None

    def idle_cost_usd(self) -> float:
        return 0.0

    def given_back(self) -> tuple[GivenBack, ...]:
        return self._given

    def unproven_orders(self) -> tuple[Unproven, ...]:
        return self._unproven

    def pool_seat(self) -> None:
        return None


def _run(backend: PassingBackend, tmp_path: Path) -> tuple[int, str]:
    screen = io.StringIO()
    pipeline = parse_pipeline(PIPELINE, "p.yml", {})
    _, code = execute(pipeline, backend, RunOptions(out_dir=tmp_path / "out"), screen)
    return code, screen.getvalue()


def test_the_servers_given_back_are_named_with_what_each_cost(tmp_path: Path) -> None:
    backend = Renting([GivenBack("RTX 3090 #88028", 0.0016), GivenBack("A100 #7", None)])
    assert isinstance(backend, RentingBackend)
    code, said = _run(backend, tmp_path)
    assert code == 0
    assert "rented and given back: RTX 3090 #88028 ($0.0016), A100 #7" in said


def test_an_unproven_order_is_named_last_and_the_run_exits_3(tmp_path: Path) -> None:
    unproven = Unproven("server 7: order 9 may be ours", "run `clore-run cleanup`")
    code, said = _run(Renting([], [unproven]), tmp_path)
    assert code == 3
    lines = said.rstrip().splitlines()
    assert lines[-3:-1] == [
        "clore-run: server 7: order 9 may be ours",
        "hint: run `clore-run cleanup`",
    ]


def test_a_backend_that_rents_nothing_names_no_servers(tmp_path: Path) -> None:
    code, said = _run(PassingBackend(), tmp_path)
    assert code == 0 and "given back" not in said
