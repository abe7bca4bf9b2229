"""Engine and local backend faults found in review: each would hang a run, leak a process or
lose a report. Nothing here sleeps to wait: threads are joined with a bound, gates are Events."""

from __future__ import annotations

import io
import textwrap
import threading
from pathlib import Path

from runner.backends.local import LocalBackend
from runner.console import Console
from runner.core.model import JobStatus, Pipeline, RunRecord, RunStatus
from runner.engine import Engine, EngineOptions
from runner.spec.loader import parse_pipeline


def pipeline_of(text: str) -> Pipeline:
    return parse_pipeline(textwrap.dedent(text), "p.yml", {})


def run_engine(engine: Engine, bound_s: float = 20.0) -> RunRecord:
    """engine.run() on a thread, failing (instead of hanging the suite) if it does not return."""
    holder: list[RunRecord] = []
    worker = threading.Thread(target=lambda: holder.append(engine.run()), daemon=True)
    worker.start()
    worker.join(bound_s)
    assert holder, f"engine.run() did not return within {bound_s} s"
    return holder[0]


def test_a_log_that_cannot_be_written_ends_the_job_instead_of_hanging_the_run(
    tmp_path: Path,
) -> None:
    """Disk full (here /dev/full) under the job's log: the attempt must still be reported."""
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "a.log").symlink_to("/dev/full")
    pipeline = pipeline_of("jobs:\n  a: {run: echo hi, workspace: false}\n")
    options = EngineOptions(out, 1, backoff=lambda n: 0.0)
    engine = Engine(pipeline, LocalBackend(tmp_path), options, Console(io.StringIO()))
    record = run_engine(engine)
    (result,) = record.results
    assert result.status is JobStatus.ERROR
    assert "No space left on device" in result.reason
    assert record.status is RunStatus.ERROR
