"""`run` and `serve` are one scheduling core behind one driver: the cases where the two used to
decide differently, end to end on the local backend."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.local import LocalBackend
from runner.core.model import Job, JobStatus, Pipeline
from runner.engine.run_command import RunOptions, execute
from runner.serve.submit import Prepared
from runner.spec.loader import parse_pipeline
from tests.fakes.fake_clock import FakeClock
from tests.serve.harness import FINAL, thread_server, wait_until

# R fails; A handles it (failure()); B needs A (success(): false, an ancestor failed); C is a
# failure() job below B, and its ancestor R failed, so it runs. GitHub documents failure() as
# true "if any ancestor job fails" in a chain of dependent jobs.
FAILURE_CHAIN = """\
jobs:
  r: {run: exit 1}
  a: {needs: r, if: failure(), run: 'true'}
  b: {needs: a, run: 'true'}
  c: {needs: b, if: failure(), run: 'true'}
"""
FAILURE_CHAIN_DECIDED = {"r": "failed", "a": "passed", "b": "skipped", "c": "passed"}


def options(tmp_path: Path) -> RunOptions:
    return RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path, backoff=lambda n: 0.0)


def test_the_failure_chain_on_run(tmp_path: Path) -> None:
    pipeline = parse_pipeline(FAILURE_CHAIN, "p.yml", {})
    record, code = execute(pipeline, LocalBackend(tmp_path), options(tmp_path), io.StringIO())
    assert {r.job_id: r.status.value for r in record.results} == FAILURE_CHAIN_DECIDED
    assert code == 1
    b = next(r for r in record.results if r.job_id == "b")
    assert (b.reason, b.failure_origin) == ("'r' failed upstream of it", "r")


def test_the_failure_chain_on_serve(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        srv.api.submit(FAILURE_CHAIN)
        decided = {j: srv.api.wait_status(f"s1.{j}", FINAL)["status"] for j in "rabc"}
    assert decided == FAILURE_CHAIN_DECIDED


def chain(n: int) -> tuple[Job, ...]:
    """j0 fails; every other job needs the one before it."""
    first = Job("j0", "j0", "exit 1", index=0, workspace=False)
    rest = (
        Job(f"j{i}", f"j{i}", "true", index=i, needs=(f"j{i - 1}",), workspace=False)
        for i in range(1, n)
    )
    return (first, *rest)


@pytest.mark.slow
def test_a_failing_20000_deep_chain_settles_on_run_with_reports(tmp_path: Path) -> None:
    pipeline = Pipeline("deep", chain(20_000), concurrency=3)
    record, code = execute(pipeline, LocalBackend(tmp_path), options(tmp_path), io.StringIO())
    assert code == 1
    assert [r.status for r in record.results[:2]] == [JobStatus.FAILED, JobStatus.SKIPPED]
    assert record.results[-1].reason == "needs 'j19998', which was skipped"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert len(summary["jobs"]) == 20_000
    assert (tmp_path / "out" / "junit.xml").stat().st_size > 0


@pytest.mark.slow
def test_a_failing_3000_deep_chain_settles_on_serve(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        srv.service.submit(Prepared("deep", chain(3_000), {}), "pipeline")
        last = srv.api.wait_status("s1.j2999", FINAL, timeout=60)
        assert (last["status"], last["reason"]) == (
            "skipped",
            "needs 's1.j2998', which was skipped",
        )
        counts = srv.service.store.counts()
    assert (counts.get("failed"), counts.get("skipped")) == (1, 2_999)


class SlowToPlace(LocalBackend):
    """Getting a place takes as long as the test says (a server renting and booting)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.acquiring = threading.Event()
        self.placed = threading.Event()

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        self.acquiring.set()
        self.placed.wait(30)
        return super().place(server, job, cancel, stages)

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        if cancel.is_set():
            return RunOutcome(None, None, "killed before it ran")
        return super().run(place, request, sink, cancel, stages)


def test_serve_counts_the_job_timeout_from_placement(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = SlowToPlace(tmp_path)
    with thread_server(tmp_path, clock=clock, backend=backend) as srv:
        (job_id,) = srv.api.submit("jobs:\n  a: {run: 'true', timeout-minutes: 1}\n")
        assert backend.acquiring.wait(10)
        clock.unix += 600  # ten minutes renting: ten times the job's own timeout
        srv.service.wake()
        srv.service.driver.call(lambda now: None).result(10)  # the loop has seen that time
        backend.placed.set()
        assert srv.api.wait_status(job_id, FINAL)["status"] == "passed"


@pytest.mark.slow
def test_serve_still_times_a_placed_job_out(tmp_path: Path) -> None:
    clock = FakeClock()
    gate = tmp_path / "gate"
    with thread_server(tmp_path, clock=clock) as srv:
        script = f"while [ ! -e {gate} ]; do sleep 0.02; done"
        (job_id,) = srv.api.submit(f"jobs:\n  a:\n    timeout-minutes: 1\n    run: {script}\n")
        wait_until(lambda: srv.service.driver.places_held == 1, what="the job placed")
        srv.service.driver.call(lambda now: None).result(10)  # the placement is in the core
        clock.unix += 61
        srv.service.wake()
        done = srv.api.wait_status(job_id, FINAL)
        gate.touch()
    assert (done["status"], done["reason"]) == ("timed_out", "timed out after 60 s")
