"""A job's log file: what each attempt adds to it, byte for byte."""

from __future__ import annotations

import io
from pathlib import Path

from runner import redact
from runner.backends.base import RunOutcome
from runner.core.model import FailureKind, Job
from runner.engine.console import Console
from runner.joblog import JobLog

JOB = Job(id="a", name="a", run="true")


def test_held_back_output_ends_stdout_first_whichever_stream_spoke_first(tmp_path: Path) -> None:
    """With a secret known, an unfinished line is held back (it could be a secret's head)
    until the attempt ends; then stdout's rest goes first, then stderr's, as always."""
    redact.register("s3cr3t-value")
    log = JobLog(tmp_path, JOB, 1, Console(io.StringIO()))
    log.header("here")
    log.write("stderr", b"err line\ne s3cr3t-")
    log.write("stdout", b"o")
    log.write("stderr", b"value")
    log.close(RunOutcome(0, None))
    lines = (tmp_path / "logs" / "a.log").read_bytes().splitlines(keepends=True)
    assert lines[0].startswith(b"=== a: attempt 1 on here at ")
    # Each stream's unfinished rest, and the verdict, on lines of their own: never spliced.
    assert lines[1:] == [b"err line\n", b"o\n", b"e ***\n", b"=== a: attempt 1 passed ===\n"]


def test_attempts_append_and_a_silent_one_writes_only_its_two_lines(tmp_path: Path) -> None:
    for number, outcome in [(1, RunOutcome(1, FailureKind.TEST_FAILURE, "exit code 1")),
                            (2, RunOutcome(0, None))]:  # fmt: skip
        log = JobLog(tmp_path, JOB, number, Console(io.StringIO()))
        log.header("here")
        log.close(outcome)
    lines = (tmp_path / "logs" / "a.log").read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith("=== a: attempt 2 on here at ")
    assert lines[1] == "=== a: attempt 1 failed: exit code 1 ==="  # words, not test_failure
    assert lines[3] == "=== a: attempt 2 passed ==="


def test_a_progress_bar_left_unfinished_does_not_swallow_the_verdict(tmp_path: Path) -> None:
    """tqdm redraws with `\r` and ends without a newline: the log's own lines still start on
    lines of their own, and the bar's bytes are kept as they came."""
    log = JobLog(tmp_path, JOB, 1, Console(io.StringIO()))
    log.header("here")
    log.write("stderr", b" 50%|#####     |\r100%|##########|")
    log.note("fetching artifacts")
    log.write("stderr", b"\rdone")
    log.close(RunOutcome(0, None))
    lines = (tmp_path / "logs" / "a.log").read_bytes().split(b"\n")  # not at the `\r`s
    assert lines[1:] == [
        b" 50%|#####     |\r100%|##########|",
        b"clore-run: fetching artifacts",
        b"\rdone",
        b"=== a: attempt 1 passed ===",
        b"",
    ]


def test_a_bar_on_stderr_then_a_line_on_stdout_stay_apart_and_in_order(tmp_path: Path) -> None:
    screen = io.StringIO()
    log = JobLog(tmp_path, JOB, 1, Console(screen, live=False, tick_s=0))
    log.header("here")
    log.write("stderr", b"\r 50%|##  |\r100%|####|")
    log.write("stdout", b"done\n")  # the job's own last line, after the bar
    log.close(RunOutcome(0, None))
    raw = (tmp_path / "logs" / "a.log").read_bytes()
    assert b"\r100%|####|\ndone\n=== a: attempt 1 passed ===\n" in raw  # not `|done`
    shown = [line for line in screen.getvalue().splitlines() if line.startswith("[a]")]
    assert shown == ["[a] 100%|####|", "[a] done"]  # the bar's end before the job's words
