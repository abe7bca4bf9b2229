"""`clore-run run --backend local` end to end: statuses, faults, limits and reports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import textwrap
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner.backends import local
from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.local import LocalBackend
from runner.core.model import Job, JobStatus, Pipeline, RunRecord
from runner.engine.run_command import RunOptions, execute, output_folder, select_jobs
from runner.errors import UsageError
from runner.spec.loader import parse_pipeline
from tests.processes import alive


def pipeline_of(text: str, environ: dict[str, str] | None = None) -> Pipeline:
    return parse_pipeline(textwrap.dedent(text), "p.yml", environ or {})


def run(
    tmp_path: Path, text: str, backend: LocalBackend | None = None, **opts: object
) -> tuple[RunRecord, int, dict[str, JobStatus]]:
    out = tmp_path / "out"
    options = RunOptions(out_dir=out, workspace_root=tmp_path / "ws", backoff=lambda n: 0.01)
    (tmp_path / "ws").mkdir(exist_ok=True)
    for key, value in opts.items():
        setattr(options, key, value)
    record, code = execute(pipeline_of(text), backend or LocalBackend(), options, io.StringIO())
    return record, code, {r.job_id: r.status for r in record.results}


@pytest.mark.slow
def test_every_status_and_the_skip_cascade(tmp_path: Path) -> None:
    record, code, status = run(
        tmp_path,
        """\
        jobs:
          ok: {run: echo hi}
          bad: {run: exit 3}
          missing: {run: no-such-command-xyz}
          segv: {run: kill -SEGV $$}
          slow: {run: sleep 30, timeout-minutes: 0.01}
          after: {needs: bad, run: echo never}
          after2: {needs: after, run: echo never}
          cleanup: {needs: bad, if: always(), run: echo cleanup}
          onfail: {needs: bad, if: failure(), run: echo onfail}
          notfail: {needs: ok, if: failure(), run: echo never}
        """,
    )
    assert code == 1
    assert status == {
        "ok": JobStatus.PASSED,
        "bad": JobStatus.FAILED,
        "missing": JobStatus.FAILED,
        "segv": JobStatus.FAILED,
        "slow": JobStatus.TIMED_OUT,
        "after": JobStatus.SKIPPED,
        "after2": JobStatus.SKIPPED,
        "cleanup": JobStatus.PASSED,
        "onfail": JobStatus.PASSED,
        "notfail": JobStatus.SKIPPED,
    }
    by_id = {r.job_id: r for r in record.results}
    assert by_id["bad"].exit_code == 3
    assert by_id["missing"].reason == "exit code 127 (command not found)"
    assert by_id["segv"].reason == "killed by signal SIGSEGV"
    assert by_id["after"].reason == "needs 'bad', which failed"
    assert by_id["after2"].reason == "needs 'after', which was skipped"
    assert by_id["slow"].attempts[0].duration_s < 10
    # our SIGTERM is not the job's exit: a timeout has no exit code (never -15)
    assert by_id["slow"].exit_code is None and by_id["slow"].reason.startswith("timed out")


def test_reports_are_written_and_valid(tmp_path: Path) -> None:
    run(tmp_path, "jobs:\n  a: {run: echo out-a}\n  b: {needs: a, run: exit 2}\n")
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    jobs = {j["id"]: j for j in summary["jobs"]}
    assert jobs["a"]["status"] == "passed" and jobs["b"]["exit_code"] == 2
    for key in ("id", "name", "status", "reason", "attempts", "duration_s", "cost_usd", "server"):
        assert key in jobs["b"]
    root = ET.parse(out / "junit.xml").getroot()
    assert root.tag == "testsuites" and root.get("failures") == "1"
    assert b"out-a" in (out / "logs" / "a.log").read_bytes()
    assert "b" in (out / "summary.md").read_text()


def test_env_workspace_and_artifacts(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "data.txt").write_text("payload")
    run(
        tmp_path,
        """\
        env: {A: "from pipeline", B: pipeline}
        jobs:
          with-ws:
            workspace: all  # ws is not a git work tree
            env: {B: "job value with 'quotes' and $dollar"}
            run: |
              cat data.txt > seen.txt
              echo "$A|$B|$CLORE_RUN_JOB|$CLORE_RUN_ATTEMPT" >> seen.txt
            artifacts: [seen.txt]
          no-ws:
            workspace: false
            run: ls -A > listing.txt
            artifacts: [listing.txt, nothing-*.bin]
        """,
    )
    art = tmp_path / "out" / "artifacts"
    assert (art / "with-ws" / "seen.txt").read_text() == (
        "payloadfrom pipeline|job value with 'quotes' and $dollar|with-ws|1\n"
    )
    assert (art / "no-ws" / "listing.txt").read_text() == "listing.txt\n"
    log = (tmp_path / "out" / "logs" / "no-ws.log").read_text()
    assert "'nothing-*.bin' matched no file" in log


def test_retry_passes_on_second_attempt(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    record, code, status = run(
        tmp_path,
        f"""\
        jobs:
          flaky:
            retries: 2
            run: test -f {flag} || {{ touch {flag}; exit 1; }}
        """,
    )
    assert code == 0 and status["flaky"] is JobStatus.PASSED
    attempts = record.results[0].attempts
    assert [a.exit_code for a in attempts] == [1, 0]
    log = (tmp_path / "out" / "logs" / "flaky.log").read_text()
    assert "attempt 1 failed: exit code 1" in log and "attempt 2 passed" in log


@pytest.mark.slow
def test_timeout_kills_background_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    _, _, status = run(
        tmp_path,
        f"""\
        jobs:
          hang:
            timeout-minutes: 0.01
            run: |
              sleep 300 &
              echo $! > {pidfile}
              sleep 300
        """,
    )
    assert status["hang"] is JobStatus.TIMED_OUT
    assert not alive(int(pidfile.read_text()))


def test_daemon_left_by_a_passing_job_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    _, code, _ = run(tmp_path, f"jobs:\n  d: {{run: 'sleep 300 & echo $! > {pidfile}'}}\n")
    assert code == 0
    assert not alive(int(pidfile.read_text()))


@pytest.mark.slow
def test_big_streams_on_both_pipes_do_not_hang(tmp_path: Path) -> None:
    _, code, _ = run(
        tmp_path,
        """\
        jobs:
          loud:
            run: |
              head -c 100000000 /dev/zero >&2 &
              head -c 50000000 /dev/zero
              wait
              printf 'end\\xff\\xfe\\n'
        """,
    )
    assert code == 0
    log = (tmp_path / "out" / "logs" / "loud.log").read_bytes()
    assert log.count(b"\0") == 150_000_000
    assert b"end\xff\xfe\n" in log


@pytest.mark.slow
def test_run_timeout_cancels_everything(tmp_path: Path) -> None:
    record, code, status = run(
        tmp_path,
        """\
        timeout-minutes: 0.01
        jobs:
          long: {run: sleep 60}
          next: {needs: long, run: echo never}
        """,
    )
    assert code == 1
    assert status == {"long": JobStatus.CANCELLED, "next": JobStatus.CANCELLED}
    assert "timed out" in record.results[0].reason


class RecordingBackend(LocalBackend):
    """Counts attempts running at once and the order they started in."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.order: list[str] = []
        self.started = threading.Event()

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.order.append(request.job.id)
        self.started.set()
        try:
            return super().run(place, request, sink, cancel)
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.slow
def test_concurrency_cap_is_reached_and_never_exceeded(tmp_path: Path) -> None:
    backend = RecordingBackend()
    jobs = "".join(f"  j{i}: {{run: sleep 0.2, workspace: false}}\n" for i in range(10))
    _, code, _ = run(tmp_path, "concurrency: 3\njobs:\n" + jobs, backend)
    assert code == 0 and backend.peak == 3


def test_priority_order_with_one_slot(tmp_path: Path) -> None:
    backend = RecordingBackend()
    run(
        tmp_path,
        """\
        concurrency: 1
        jobs:
          low: {priority: low, run: "true"}
          normal: {run: "true"}
          urgent: {priority: urgent, run: "true"}
          high: {priority: high, run: "true"}
        """,
        backend,
    )
    assert backend.order == ["urgent", "high", "normal", "low"]


def test_cancel_kills_running_and_cancels_pending(tmp_path: Path) -> None:
    from runner.engine.console import Console
    from runner.engine.pipeline_run import PipelineRun, RunSettings

    backend = RecordingBackend()
    pipeline = pipeline_of("jobs:\n  a: {run: sleep 60}\n  b: {needs: a, run: echo never}\n")
    engine = PipelineRun(pipeline, backend, RunSettings(tmp_path, 2), Console(io.StringIO()))
    holder: list[RunRecord] = []
    worker = threading.Thread(target=lambda: holder.append(engine.run()))
    worker.start()
    assert backend.started.wait(10)
    engine.cancel("interrupted by SIGINT")
    worker.join(15)
    record = holder[0]
    assert record.status.value == "interrupted"
    assert [(r.job_id, r.status) for r in record.results] == [
        ("a", JobStatus.CANCELLED),
        ("b", JobStatus.CANCELLED),
    ]


def test_select_jobs_keeps_what_they_need() -> None:
    pipeline = pipeline_of(
        """\
        jobs:
          a: {run: x}
          b: {needs: a, run: x}
          c: {run: x}
          m: {needs: b, strategy: {matrix: {n: [1, 2]}}, run: x}
        """
    )
    assert [j.id for j in select_jobs(pipeline, ["m"]).jobs] == ["a", "b", "m-1", "m-2"]
    assert [j.id for j in select_jobs(pipeline, ["m-2"]).jobs] == ["a", "b", "m-2"]
    with pytest.raises(UsageError, match=r"unknown job 'bb'.*did you mean 'b'"):
        select_jobs(pipeline, ["bb"])


def test_unwritable_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot write there"):
        run(tmp_path, "jobs:\n  a: {run: x}\n", out_dir=blocker / "out")


def test_two_runs_into_the_same_out(tmp_path: Path) -> None:
    with output_folder(tmp_path / "out"), pytest.raises(UsageError, match="another clore-run"):
        run(tmp_path, "jobs:\n  a: {run: x}\n")


def test_job_model_defaults_for_local_runs() -> None:
    job = pipeline_of("jobs:\n  a: {run: x}\n").jobs[0]
    assert isinstance(job, Job) and job.timeout_s == 3600 and job.workspace is True


class SlowToProvision(LocalBackend):
    """Takes longer to hand out a place than the job's whole timeout, as renting can."""

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        cancel.wait(1.0)  # the provisioning delay being modelled, not a wait for the test
        return super().place(server, job, cancel)


@pytest.mark.slow
def test_provisioning_time_does_not_count_against_the_job_timeout(tmp_path: Path) -> None:
    _, code, status = run(
        tmp_path, "jobs:\n  a: {run: 'true', timeout-minutes: 0.01}\n", SlowToProvision()
    )
    assert code == 0 and status["a"] is JobStatus.PASSED


def test_an_artifact_that_cannot_be_copied_is_a_warning_not_an_infrastructure_error(
    tmp_path: Path,
) -> None:
    """The job passed: a file it left that cannot be collected (here a symlink loop) must not
    turn that into `error`, nor make clore-run run the job again."""
    record, code, status = run(
        tmp_path,
        """\
        jobs:
          a:
            workspace: false
            run: ln -s loop-b loop-a; ln -s loop-a loop-b; echo ok > ok.txt
            artifacts: ["*"]
        """,
    )
    assert status["a"] is JobStatus.PASSED and code == 0
    assert len(record.results[0].attempts) == 1
    assert (tmp_path / "out" / "artifacts" / "a" / "ok.txt").read_text() == "ok\n"
    assert "loop-a" in (tmp_path / "out" / "logs" / "a.log").read_text()


def test_artifacts_whose_names_hold_a_newline_or_esc_are_refused_not_written(
    tmp_path: Path,
) -> None:
    """Issue 25: such names were copied as they are; upload-artifact fails on them and a
    terminal listing the folder obeys the ESC."""
    _, code, status = run(
        tmp_path,
        """\
        jobs:
          a:
            workspace: false
            run: |
              echo ok > ok.txt
              printf x > "$(printf 'bad\\nname.txt')"
              printf x > "$(printf 'esc\\033[2J.txt')"
              mkdir -p out && echo in > out/fine.txt && printf x > "$(printf 'out/c\\rr.txt')"
            artifacts: ["*.txt", out]
        """,
    )
    assert status["a"] is JobStatus.PASSED and code == 0
    art = tmp_path / "out" / "artifacts" / "a"
    assert sorted(p.relative_to(art).as_posix() for p in art.rglob("*")) == [
        "ok.txt",
        "out",
        "out/fine.txt",
    ]
    log = (tmp_path / "out" / "logs" / "a.log").read_text()
    assert log.count("its name holds a control character") == 3
    assert "'bad\\nname.txt'" in log and "\x1b" not in log


def test_a_second_run_with_its_output_inside_the_workspace(tmp_path: Path) -> None:
    """`clore-run p.yml` twice in a folder (not a git checkout): the first run's results
    are not workspace files - the second run deletes its stale logs before jobs copy them."""
    out = tmp_path / "ws" / "clore-run-results"
    text = """\
        jobs:
          a: {run: "true"}
          b: {needs: a, run: find . -type f > files.txt, artifacts: [files.txt]}
        """
    run(tmp_path, text, out_dir=out)
    _, code, status = run(tmp_path, text, out_dir=out)
    assert code == 0, status
    assert (out / "artifacts" / "b" / "files.txt").read_text() == "./files.txt\n"


def test_jobs_do_not_inherit_clore_runs_own_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLORE_API_KEY", "key-that-must-not-leak")
    monkeypatch.setenv("CLORE_RUN_TOKEN", "token-that-must-not-leak")
    monkeypatch.setenv("SOME_USER_VAR", "kept")
    run(tmp_path, "jobs:\n  a: {run: env > env.txt, artifacts: [env.txt]}\n")
    seen = (tmp_path / "out" / "artifacts" / "a" / "env.txt").read_text()
    assert "SOME_USER_VAR=kept" in seen
    assert "must-not-leak" not in seen


def test_an_out_folder_of_the_users_is_refused_not_emptied(tmp_path: Path) -> None:
    mine = tmp_path / "project"
    (mine / "logs").mkdir(parents=True)
    (mine / "logs" / "keep.txt").write_text("precious")
    with pytest.raises(UsageError, match="not written by clore-run"):
        run(tmp_path, "jobs:\n  a: {run: 'true'}\n", out_dir=mine)
    assert (mine / "logs" / "keep.txt").read_text() == "precious"


def test_a_folder_holding_any_report_s_name_is_refused(tmp_path: Path) -> None:
    """Every file the reports write counts, timeline.svg too (run's list had left it out)."""
    from runner.report import REPORT_FILES

    for name in REPORT_FILES:
        mine = tmp_path / name.replace(".", "-")
        mine.mkdir()
        (mine / name).write_text("mine")
        with pytest.raises(UsageError, match=f"already holds {name}, not written by clore-run"):
            run(tmp_path, "jobs:\n  a: {run: 'true'}\n", out_dir=mine)
        assert (mine / name).read_text() == "mine"


def test_a_previous_clore_run_folder_is_reused_and_cleaned(tmp_path: Path) -> None:
    run(tmp_path, "jobs:\n  old: {run: 'true'}\n")
    run(tmp_path, "jobs:\n  new: {run: 'true'}\n")
    assert sorted(p.name for p in (tmp_path / "out" / "logs").iterdir()) == ["new.log"]


class FailsToShutDown(LocalBackend):
    def shutdown(self) -> None:
        super().shutdown()
        raise RuntimeError("API down while giving back")


def test_a_backend_failing_to_shut_down_still_gets_the_reports_written(tmp_path: Path) -> None:
    record, code, _ = run(tmp_path, "jobs:\n  a: {run: 'true'}\n", FailsToShutDown())
    assert code == 0 and record.results[0].status is JobStatus.PASSED
    assert (tmp_path / "out" / "summary.json").exists()


def test_a_reason_with_line_breaks_prints_on_one_line() -> None:
    from runner.core.model import JobResult
    from runner.engine.console import Console

    out = io.StringIO()
    job = pipeline_of("jobs:\n  a: {run: x}\n").jobs[0]
    Console(out, live=False).job_done(
        job, JobResult("a", JobStatus.ERROR, "ssh failed\n::add-mask::x\r\n::error::boom")
    )
    zw = "\u200b"  # breaks `::` so that no reader takes it for a workflow command
    assert out.getvalue() == f"[a] error: ssh failed :{zw}:add-mask:{zw}:x :{zw}:error:{zw}:boom\n"


def test_a_directory_is_handed_on_only_when_left_empty_and_as_made(tmp_path: Path) -> None:
    """An empty job directory is renamed for the next job (removing one is slow on some
    disks); one with files left, its mode changed or a link put in its place never is."""
    backend = LocalBackend(root=tmp_path)
    cancel = threading.Event()

    def place(name: str) -> Path:
        return Path(backend.place(1, Job(id=name, name=name, run=""), cancel).facts["workdir"])

    def release(workdir: Path) -> None:
        backend.attempt_done(Place(name="localhost", facts={"workdir": str(workdir)}))

    try:
        first = place("a")
        inode = first.stat().st_ino
        release(first)
        second = place("b")
        assert second.name.startswith("b-") and not first.exists()
        assert second.stat().st_ino == inode and not any(second.iterdir())  # handed on, empty
        (second / "left.txt").write_text("x")
        release(second)
        assert not second.exists()
        third = place("c")
        assert not any(third.iterdir())  # what was left went with its directory
        mode = third.stat().st_mode
        third.chmod(0o500)
        release(third)
        fourth = place("d")
        assert fourth.stat().st_mode == mode  # a directory of another mode is not handed on
        fourth.rmdir()
        fourth.symlink_to(tmp_path)  # a link in its place: never handed on, never followed
        release(fourth)
        fifth = place("e")
        assert fifth.is_dir() and not fifth.is_symlink() and not any(fifth.iterdir())
        assert tmp_path.is_dir()
    finally:
        backend.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
def test_a_job_reads_dev_null_writes_two_pipes_and_holds_no_other_descriptor(
    tmp_path: Path,
) -> None:
    _, code, _ = run(
        tmp_path,
        """\
        jobs:
          fds:
            workspace: false
            run: |
              ls /proc/$$/fd > fds  # bash's own, while it runs nothing else
              echo "open: $(grep -vx 255 fds | tr '\\n' ' ')"
              for n in 0 1 2; do echo "$n: $(readlink /proc/$$/fd/$n)"; done
              read -r line || echo "stdin: at its end"
        """,
    )
    assert code == 0
    lines = (tmp_path / "out" / "logs" / "fds.log").read_text().splitlines()[1:-1]
    assert lines[0] == "open: 0 1 2 "  # bash keeps the script on 255; nothing of ours
    assert lines[1] == "0: /dev/null" and lines[4] == "stdin: at its end"
    out, err = lines[2].split(": ")[1], lines[3].split(": ")[1]
    assert out.startswith("pipe:") and err.startswith("pipe:") and out != err


@pytest.mark.slow
def test_a_detached_child_writing_on_does_not_keep_an_ended_job_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child the script detached writes on without a pause long enough for a quiet wait,
    before and after the script ends. The end is still seen: the job passes instead of
    timing out."""
    monkeypatch.setattr(local, "DRAIN_AFTER_EXIT_S", 0.3)
    pidfile = tmp_path / "writer.pid"
    try:
        _, code, status = run(
            tmp_path,
            f"""\
            jobs:
              w:
                workspace: false
                timeout-minutes: 0.1
                run: |
                  setsid sh -c 'while :; do echo more; sleep 0.01; done' &
                  echo $! > {pidfile}
                  sleep 0.3  # still running when first asked
            """,
        )
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert status["w"] is JobStatus.PASSED and code == 0
