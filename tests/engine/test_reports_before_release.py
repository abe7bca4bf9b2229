"""A slow give-back at the end of a run cannot cost the reports: they are written before the
servers are given back (saying so), and written again once they are back.

GitHub cancels with SIGINT, SIGTERM 7.5 s later, SIGKILL 2.5 s after that; with a 6 s cancel
lag the reports used to be written only after the give-back, so a run killed in it had none."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

from runner.backends.base import GivenBack, Unproven
from runner.core.model import Job
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from tests.fakes.passing_backend import PassingBackend


class SlowGiveBack(PassingBackend):
    """A renting backend: every job passes; `shutdown` (giving servers back) notes which
    reports exist when it starts."""

    name = "slowrent"
    where = "rented"  # free: the idle cost alone is the total

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seen_at_shutdown: dict[str, str] = {}

    def set_pending(self, jobs: Sequence[Job]) -> None:
        return None

    def stop_soon(self) -> None:
        pass

    def idle_cost_usd(self) -> float:
        return 0.25 if self.seen_at_shutdown else 0.0  # known once the servers are back

    def given_back(self) -> tuple[GivenBack, ...]:
        return ()

    def unproven_orders(self) -> tuple[Unproven, ...]:
        return ()

    def pool_seat(self) -> None:
        return None

    def shutdown(self) -> None:
        if self.seen_at_shutdown:
            return
        for name in ("junit.xml", "summary.json", "summary.md"):
            path = self.out / name
            self.seen_at_shutdown[name] = path.read_text() if path.exists() else ""


def test_the_reports_exist_before_the_servers_are_given_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    backend = SlowGiveBack(out)
    pipeline = parse_pipeline("jobs:\n  a: {run: 'true', workspace: false}\n", "p.yml", {})
    _, code = execute(pipeline, backend, RunOptions(out_dir=out), io.StringIO())
    assert code == 0
    early = backend.seen_at_shutdown
    assert all(early.values()), "a report was missing while the servers were given back"
    early_summary = json.loads(early["summary.json"])
    assert early_summary["status"] == "passed"
    assert any("being given back" in w for w in early_summary["warnings"])
    assert "being given back" in early["summary.md"]
    final = json.loads((out / "summary.json").read_text())
    assert not any("being given back" in w for w in final["warnings"])
    assert final["total_cost_usd"] == 0.25  # the final write has what the give-back knew


def test_a_local_run_writes_its_reports_once(tmp_path: Path, monkeypatch: object) -> None:
    import runner.engine.run_command as run_command
    from runner.backends.local import LocalBackend

    writes: list[Path] = []
    real = run_command.write_reports

    def counting(out_dir: Path, *args: object, **kw: object) -> object:
        writes.append(out_dir)
        return real(out_dir, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_command, "write_reports", counting)  # type: ignore[attr-defined]
    pipeline = parse_pipeline("jobs:\n  a: {run: 'true', workspace: false}\n", "p.yml", {})
    execute(pipeline, LocalBackend(), RunOptions(out_dir=tmp_path / "out"), io.StringIO())
    assert len(writes) == 1  # nothing is rented: no early write to pay for
