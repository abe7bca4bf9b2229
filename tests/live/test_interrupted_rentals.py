"""Ctrl-C on Clore while a job's server boots: what was rented and given back is on screen and
in the reports, never a job row of `–` and $0.00 beside a run total that paid for a server."""

from __future__ import annotations

import io
import json
import os
import signal

import pytest

from runner.backends.base import NO_STAGES, StageSink
from runner.backends.clore.backend import CloreBackend
from runner.core.model import JobStatus
from runner.core.rentals import RentServer
from runner.engine.run_command import RunOptions, execute
from runner.report.markdown import cell
from runner.spec.loader import parse_pipeline
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture

PIPELINE = "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n"


class _Stopping(StageSink):
    """The rent's stages; at `booting` (the order exists, the server is not up) a minute
    passes on the fake's clock, the run gets a SIGINT, and the rent goes on only once the run
    has told it to stop."""

    def __init__(self, inner: StageSink, backend: CloreBackend, setup: Setup) -> None:
        self.inner, self.backend, self.setup = inner, backend, setup

    def stage(self, stage, detail="", usd_per_hour=None):  # type: ignore[no-untyped-def]
        self.inner.stage(stage, detail, usd_per_hour)
        if stage == "booting":
            self.setup.clock.advance(60)  # a minute of booting, billed
            with self.backend._lock:
                (cancel,) = self.backend._setting_up.values()
            os.kill(os.getpid(), signal.SIGINT)
            assert cancel.wait(10), "the run never told the rent to stop"

    def note(self, text):  # type: ignore[no-untyped-def]
        self.inner.note(text)


@pytest.mark.slow
def test_ctrl_c_while_booting_says_what_was_rented_and_given_back(setup: Setup) -> None:
    pipeline = parse_pipeline(PIPELINE, "p.yml", {})
    backend, ledger = setup.backend(pipeline)

    class Interrupting(CloreBackend):
        def rent(self, cmd: RentServer, job, report, stages=NO_STAGES):  # type: ignore[no-untyped-def]
            super().rent(cmd, job, report, _Stopping(stages, self, setup))

    interrupting = Interrupting(
        **{f: getattr(backend, f) for f in ("client", "provisioner", "clock", "settings")}
    )
    (setup.tmp / "ws").mkdir()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    screen = io.StringIO()
    record, code = execute(pipeline, interrupting, options, screen)
    assert code == 130
    assert record.results[0].status is JobStatus.CANCELLED
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    summary = json.loads((setup.tmp / "out" / "summary.json").read_text())
    total = summary["total_cost_usd"]
    assert total > 0 and summary["jobs"][0]["cost_usd"] == 0  # the job's row: it ran nowhere
    # The run's total is what the rented server cost: a line names it, and that it went back.
    said = f"rented and given back: NVIDIA GeForce RTX 3090 #88028 (${total:.4f})"
    assert f"clore-run: {said}\n" in screen.getvalue(), screen.getvalue()
    assert screen.getvalue().count("rented and given back") == 1
    assert said in summary["warnings"]
    # summary.md says it beside the cost, not among the warnings: nothing went wrong.
    beside = f" · **rented and given back**: {cell(said.split(': ', 1)[1], 500)}\n"
    markdown = (setup.tmp / "out" / "summary.md").read_text()
    assert beside in markdown and "### Warnings" not in markdown
