"""Our side's faults are not a server's: a workspace file gone while it is sent, or the output
disk full, used to be retried as infrastructure failures, renting a new server (and paying its
fee) each time. The job now fails once, with the cause, and the run exits 3."""

from __future__ import annotations

import errno
import io
import threading
from pathlib import Path

from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.local import LocalBackend
from runner.clock import SYSTEM_CLOCK
from runner.core.model import FailureKind, Job, JobStatus
from runner.engine.attempt import AttemptRunner, Kill
from runner.engine.console import Console
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from tests.fakes.passing_backend import PassingBackend


def test_a_workspace_file_gone_before_the_copy_is_ours(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    runner = AttemptRunner(
        LocalBackend(tmp_path),
        tmp_path / "out",
        SYSTEM_CLOCK,
        Console(io.StringIO()),
        workspace_root=tmp_path / "ws",
        workspace_files=("gone.txt",),
    )
    ran = runner.run(Job(id="a", name="a", run="true"), 1, 1, 60.0, Kill())
    assert ran.attempt.failure is FailureKind.UNAVAILABLE  # not retried on another server
    assert "on this machine: cannot copy workspace file" in ran.attempt.message
    assert "gone.txt" in ran.attempt.message


class FullDisk(PassingBackend):
    """Every attempt fails writing to the output folder, as on a full disk."""

    name = "fulldisk"

    def __init__(self) -> None:
        self.placed = 0

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        self.placed += 1
        return Place("box")

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        path = request.artifacts_dir / "big.bin"
        raise OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_output_disk_fails_the_job_once_with_the_cause(tmp_path: Path) -> None:
    backend = FullDisk()
    pipeline = parse_pipeline(
        "jobs:\n  a: {run: 'true', retries: 2, workspace: false}\n", "p.yml", {}
    )
    record, code = execute(pipeline, backend, RunOptions(out_dir=tmp_path / "out"), io.StringIO())
    (result,) = record.results
    assert (code, result.status, backend.placed) == (3, JobStatus.ERROR, 1)
    assert "on this machine: cannot write" in result.attempts[0].message
    assert "No space left on device" in result.attempts[0].message
