"""A run survives faults of its backend and its own files: each of these would hang a run, leak
a process or lose a report. Nothing here sleeps to wait: threads are joined with a bound, gates
are Events."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from runner import cli
from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.clore import factory
from runner.backends.local import LocalBackend
from runner.core.model import FailureKind, Job, JobStatus, Pipeline, RunRecord, RunStatus
from runner.engine import run_command
from runner.engine.console import Console
from runner.engine.pipeline_run import PipelineRun, RunSettings
from runner.engine.run_command import RunOptions, execute
from runner.errors import RunMustStop
from runner.spec.loader import parse_pipeline
from tests.processes import alive, marked_env


def pipeline_of(text: str) -> Pipeline:
    return parse_pipeline(textwrap.dedent(text), "p.yml", {})


def run_bounded(pipeline_run: PipelineRun, bound_s: float = 10.0) -> RunRecord:
    """run() on a thread, failing (instead of hanging the suite) if it does not return."""
    holder: list[RunRecord] = []
    worker = threading.Thread(target=lambda: holder.append(pipeline_run.run()), daemon=True)
    worker.start()
    worker.join(bound_s)
    assert holder, f"run() did not return within {bound_s} s"
    return holder[0]


def test_a_log_that_cannot_be_written_ends_the_job_instead_of_hanging_the_run(
    tmp_path: Path,
) -> None:
    """Disk full (here /dev/full) under the job's log: the attempt must still be reported."""
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "a.log").symlink_to("/dev/full")
    pipeline = pipeline_of("jobs:\n  a: {run: echo hi, workspace: false}\n")
    options = RunSettings(out, 1, backoff=lambda n: 0.0)
    pipeline_run = PipelineRun(pipeline, LocalBackend(tmp_path), options, Console(io.StringIO()))
    record = run_bounded(pipeline_run)
    (result,) = record.results
    assert result.status is JobStatus.ERROR
    assert "No space left on device" in result.reason
    assert record.status is RunStatus.ERROR


class FailingSink:
    """The log refuses the first write, as a full disk does."""

    def write(self, stream: str, data: bytes) -> None:
        raise OSError(28, "No space left on device")


def test_a_failing_log_does_not_leave_the_job_running(tmp_path: Path) -> None:
    pidfile = tmp_path / "job.pid"
    job = pipeline_of(
        f"jobs:\n  a: {{run: 'echo $$ > {pidfile}; echo hi; sleep 300', workspace: false}}\n"
    ).jobs[0]
    backend = LocalBackend(tmp_path)
    place = backend.place(1, job, threading.Event())
    request = RunRequest(job, 1, {}, None, (), tmp_path / "artifacts", 60.0)
    try:
        with pytest.raises(OSError, match="No space"):
            backend.run(place, request, FailingSink(), threading.Event())
        assert not alive(int(pidfile.read_text()))
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        backend.attempt_done(place)
        backend.shutdown()


class FastClock:
    """The run's clock running `speed` times faster than real time, so that its grace
    periods (seconds) pass in milliseconds."""

    def __init__(self, speed: float) -> None:
        self.t0 = time.monotonic()
        self.speed = speed

    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def time(self) -> float:
        return 1_000_000.0 + self.now()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.speed)


class IgnoresCancel(LocalBackend):
    """A backend whose run() does not honour its cancel event (a hung connection)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.started = threading.Event()
        self.gate = threading.Event()  # set by the test when it is over

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        self.started.set()
        self.gate.wait(60)
        return RunOutcome(0, None)


@pytest.mark.slow
def test_a_run_timeout_settles_attempts_that_ignore_their_kill(tmp_path: Path) -> None:
    backend = IgnoresCancel(tmp_path)
    pipeline = pipeline_of(
        "timeout-minutes: 1\njobs:\n  a: {run: 'true', workspace: false}\n"
        "  b: {needs: a, run: 'true'}\n"
    )
    options = RunSettings(tmp_path / "out", 1)
    pipeline_run = PipelineRun(
        pipeline, backend, options, Console(io.StringIO()), clock=FastClock(100)
    )
    try:
        record = run_bounded(pipeline_run)
    finally:
        backend.gate.set()
    assert record.status is RunStatus.FAILED
    assert {r.job_id: r.status for r in record.results} == {
        "a": JobStatus.CANCELLED,
        "b": JobStatus.CANCELLED,
    }
    assert record.results[0].reason == "the run timed out after 60 s"


@pytest.mark.slow
def test_a_cancel_ends_within_one_grace_period_when_an_attempt_ignores_it(
    tmp_path: Path,
) -> None:
    """GitHub sends SIGKILL 10 s after SIGINT: the grace (5 s, 50 ms on this clock) is all the
    stuck attempt gets, not that plus another wait for its thread."""
    backend = IgnoresCancel(tmp_path)
    pipeline = pipeline_of("jobs:\n  a: {run: 'true', workspace: false}\n")
    options = RunSettings(tmp_path / "out", 1)
    pipeline_run = PipelineRun(
        pipeline, backend, options, Console(io.StringIO()), clock=FastClock(100)
    )
    holder: list[RunRecord] = []
    worker = threading.Thread(target=lambda: holder.append(pipeline_run.run()), daemon=True)
    worker.start()
    try:
        assert backend.started.wait(10)
        pipeline_run.cancel("interrupted by SIGINT")
        sent = time.monotonic()
        worker.join(10)
        took = time.monotonic() - sent
    finally:
        backend.gate.set()
    assert holder and holder[0].status is RunStatus.INTERRUPTED
    assert holder[0].results[0].reason == "interrupted by SIGINT"
    assert took < 2.5  # 50 ms of grace and a tick or two of the loop


STUCK_RUN = """\
import io, sys, threading
from pathlib import Path
from runner.engine.console import Console
from runner.engine.pipeline_run import PipelineRun, RunSettings
from tests.engine.test_run_survives_faults import FastClock, IgnoresCancel, pipeline_of

backend = IgnoresCancel(Path(sys.argv[1]))
backend.gate = threading.Event()  # never set: the attempt never returns
pipeline = pipeline_of("jobs:\\n  a: {run: 'true', workspace: false}\\n")
options = RunSettings(Path(sys.argv[1]) / "out", 1)
pipeline_run = PipelineRun(pipeline, backend, options, Console(io.StringIO()), clock=FastClock(100))
threading.Thread(target=lambda: backend.started.wait() and pipeline_run.cancel("SIGINT")).start()
print(pipeline_run.run().status.value, flush=True)
"""


@pytest.mark.slow
def test_the_process_can_exit_while_an_attempt_ignores_its_cancel(tmp_path: Path) -> None:
    """The run gave up on the stuck attempt: its thread must not keep the process alive."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK_RUN, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
        env=marked_env(),
    )
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert out.decode().strip() == "interrupted"
    assert proc.returncode == 0


class HungUpTerminal(io.StringIO):
    """A terminal that went away (ssh session dropped): every write fails."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")


def test_reports_are_written_when_the_terminal_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = RunOptions(out_dir=out, workspace_root=tmp_path)
    pipeline = pipeline_of("jobs:\n  a: {run: 'exit 1', workspace: false}\n")
    _, code = execute(pipeline, LocalBackend(tmp_path), options, HungUpTerminal())
    assert code == 1
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_a_script_that_ended_in_time_is_not_timed_out_while_its_pipes_drain(
    tmp_path: Path,
) -> None:
    """The script exits 0 at once; a child it detached (setsid) holds the pipes, and the
    backend drains them for a while, past the job's timeout. The verdict is the script's."""
    pidfile = tmp_path / "daemon.pid"
    pipeline = pipeline_of(
        f"jobs:\n  a: {{run: 'setsid sleep 30 & echo $! > {pidfile}', timeout-minutes: 0.01,"
        " workspace: false}\n"
    )
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path)
    try:
        record, code = execute(pipeline, LocalBackend(tmp_path), options, io.StringIO())
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert record.results[0].status is JobStatus.PASSED, record.results[0].reason
    assert code == 0


def test_a_local_timeout_says_after_how_long(tmp_path: Path) -> None:
    """The same words whichever notices first, the backend or the core's timer."""
    job = pipeline_of("jobs:\n  a: {run: sleep 30, workspace: false}\n").jobs[0]
    backend = LocalBackend(tmp_path)
    place = backend.place(1, job, threading.Event())
    request = RunRequest(job, 1, {}, None, (), tmp_path / "artifacts", 0.2)
    try:
        outcome = backend.run(place, request, FailingSink(), threading.Event())
    finally:
        backend.attempt_done(place)
        backend.shutdown()
    assert (outcome.failure, outcome.message) == (FailureKind.TIMEOUT, "timed out after 0.2 s")


class KeyRefused(LocalBackend):
    """Renting for job `a` finds the API key refused: nothing else can succeed either."""

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        if job.id == "a":
            raise RunMustStop("the API key was refused")
        return super().place(server, job, cancel)


def test_a_run_stopped_by_the_infrastructure_is_an_error_even_when_the_job_may_fail(
    tmp_path: Path,
) -> None:
    """`a` may fail (continue-on-error), but the run it stopped did not pass: `b` never
    finished. Exit 3, not 0."""
    pipeline = pipeline_of(
        """\
        jobs:
          a: {run: "true", continue-on-error: true, workspace: false}
          b: {run: sleep 30, workspace: false}
        """
    )
    options = RunSettings(tmp_path / "out", 2)
    record = run_bounded(
        PipelineRun(pipeline, KeyRefused(tmp_path), options, Console(io.StringIO()))
    )
    assert {r.job_id: r.status for r in record.results} == {
        "a": JobStatus.ERROR,
        "b": JobStatus.CANCELLED,
    }
    assert record.results[1].reason == "the API key was refused"
    assert record.status is RunStatus.ERROR


def test_the_concurrency_flag_reaches_the_clore_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clore backend caps the servers held at its own concurrency, and the run at that:
    built from the file's value, `--concurrency 8` still ran 3 at a time."""
    seen: list[int] = []

    def clore_backend(pipeline: Pipeline, ledger: Path, run_id: str, **_pool: object) -> object:
        seen.append(pipeline.concurrency)
        retry = SimpleNamespace(max_attempts=1)
        return SimpleNamespace(client=SimpleNamespace(retry=retry, hooks=SimpleNamespace()))

    # The run command imports these when it runs, so they are patched where they live.
    monkeypatch.setattr(factory, "clore_backend", clore_backend)
    monkeypatch.setattr(run_command, "execute", lambda pipeline, backend, options: (None, 0))
    path = tmp_path / "p.yml"
    path.write_text("concurrency: 3\njobs:\n  a: {run: 'true'}\n")
    args = ["run", str(path), "--backend", "clore", "--concurrency", "8"]
    with pytest.raises(SystemExit) as info:
        cli.main([*args, "--ledger", str(tmp_path / "ledger.db")])
    assert info.value.code == 0
    assert seen == [8]
