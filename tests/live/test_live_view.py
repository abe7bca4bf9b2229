"""The live view at set moments of a fake-clock run, drawn into fixed-size virtual terminals
(rich's own recording console, and pyte for the whole byte stream a terminal would get)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pyte
from rich.console import Console as RichConsole

from runner.backends.base import NO_STAGES, Place, RunOutcome
from runner.backends.local import LocalBackend
from runner.core.model import Attempt, FailureKind, Job, JobResult, JobStatus
from runner.engine.console import Console
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from tests.fakes.fake_clock import FakeClock


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


JOBS = (
    Job(id="build", name="build", run="make"),
    Job(id="train", name="train", run="python train.py", needs=("build",), retries=2),
    Job(
        id="evaluate-a-model-with-a-very-long-name-indeed",
        name="evaluate",
        run="x",
        needs=("train",),
    ),
)


def screen_at(console: Console, now: float, width: int = 80, height: int = 24) -> list[str]:
    """The live table as a terminal `width` columns wide shows it at `now`."""
    rec = RichConsole(width=width, height=height, record=True, file=io.StringIO())
    rec.print(console.renderable(now, width, height))
    return rec.export_text().splitlines()


def quiet_console(clock: FakeClock, stream: io.StringIO | None = None, **kw: object) -> Console:
    return Console(
        stream or FakeTty(),
        live=True,
        jobs=JOBS,
        budget_usd=5.0,
        name="demo",
        clock=clock,
        tick_s=0,
        width=80,
        height=24,
        **kw,  # type: ignore[arg-type]
    )


def test_the_clock_advances_while_a_job_is_quiet_and_stages_and_costs_show() -> None:
    clock = FakeClock()
    console = quiet_console(clock)
    build = JOBS[0]
    console.job_started(build, 1)
    console.stage(build, "renting", "RTX 4090 #88028", usd_per_hour=0.72)
    first = screen_at(console, clock.unix + 5)
    assert any("renting $0.72/h RTX 4090 #88028" in line for line in first)
    clock.unix += 30
    console.stage(build, "booting", "order 7")
    at_40 = "\n".join(screen_at(console, clock.unix + 10))
    at_100 = "\n".join(screen_at(console, clock.unix + 70))  # no event, no output in between
    assert "booting order 7 10s" in at_40 and "booting order 7 1m 10s" in at_100
    assert "40s" in at_40 and "1m 40s" in at_100  # the job's own elapsed ticks too
    # Cost so far: $0.72/h over 40 s and 100 s, and the header's spend against the budget.
    assert "$0.0080" in at_40 and "$0.0200" in at_100
    assert "0/3 done" in at_100 and "$0.0200 of $5.00" in at_100
    assert "waiting for needs" in at_100  # train and evaluate
    console.close()


def test_width_80_never_wraps_and_a_long_name_is_cut_not_wrapped() -> None:
    clock = FakeClock()
    console = quiet_console(clock)
    for job in JOBS:
        console.job_started(job, 1)
        console.stage(job, "running", "on a server with a very long description " * 3)
    lines = screen_at(console, clock.unix + 3600 * 5)
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith(("build", "train", "evaluat"))]
    assert len(rows) == 3  # one line each: nothing wrapped onto a second line
    assert any("…" in row for row in rows)
    wide = screen_at(console, clock.unix + 10, width=160)
    assert all(len(line) <= 160 for line in wide) and max(len(x) for x in wide) > 80
    console.close()


def test_a_table_taller_than_the_terminal_says_how_many_more() -> None:
    clock = FakeClock()
    jobs = tuple(Job(id=f"j{i:02d}", name=f"j{i}", run="x") for i in range(50))
    console = Console(FakeTty(), live=True, jobs=jobs, clock=clock, tick_s=0, width=80, height=24)
    for job in jobs[:30]:
        console.job_started(job, 1)
    lines = screen_at(console, clock.unix + 1, height=24)
    assert len(lines) <= 24
    assert any(re.search(r"… \d+ more: .*\d+ (running|queued)", line) for line in lines)
    console.close()


def test_control_sequences_from_a_job_are_escaped_and_progress_bars_show_their_latest_state() -> (
    None
):
    clock = FakeClock()
    stream = FakeTty()
    console = quiet_console(clock, stream, env={"TERM": "xterm-256color", "COLUMNS": "80"})
    build = JOBS[0]
    console.job_started(build, 1)
    console.placed(build, Place("localhost"))
    console.notice("before the job spoke")
    console.output(build, "stdout", b"\x1b]0;pwned\x07\x1b[2Jhello\n")
    console.output(build, "stdout", b"\r 10%|#         |\r 50%|#####     |")
    console.tick(clock.unix + 1)
    screen = "\n".join(screen_at(console, clock.unix + 1))
    assert "▸ 50%|#####" in screen  # the bar's latest state, in the job's row, live
    console.output(build, "stdout", b"\r100%|##########|\n")
    console.close()

    term = pyte.Screen(80, 24)
    term.set_mode(pyte.modes.LNM)  # a newline returns the carriage, as the tty driver makes it
    pyte.ByteStream(term).feed(stream.getvalue().encode())
    shown = "\n".join(term.display)
    assert term.title == ""  # the job did not set the terminal's title
    assert "[build] hello" in shown  # nor cleared the screen: the sequences are gone
    assert "clore-run: before the job spoke" in shown
    assert "[build] 100%|##########|" in shown  # the finished bar, once, with its prefix
    assert "10%" not in shown
    assert all(len(line.rstrip()) <= 80 for line in term.display)


def test_retries_and_lost_servers_are_said_in_words() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    console = Console(stream, live=False, jobs=JOBS, clock=clock, tick_s=0)
    train = JOBS[1]
    console.job_started(train, 1)
    console.attempt_ended(
        train, Attempt(1, clock.unix, clock.unix + 5, 3, FailureKind.TEST_FAILURE)
    )
    console.requeued(train, clock.unix + 2)
    lost = Attempt(
        2,
        clock.unix,
        clock.unix + 9,
        None,
        FailureKind.SERVER_LOST,
        "outbid",
        facts={"server_id": "88028"},
    )
    console.attempt_ended(train, lost)
    console.requeued(train, clock.unix + 4)
    lines = stream.getvalue().splitlines()
    assert "[train] attempt 1 failed (exit 3); retrying in 2 s (retry 1 of 2)" in lines
    assert "[train] server #88028 lost (outbid); retrying on another server in 4 s (1 of 3)" in (
        lines
    )


def test_a_failure_continue_on_error_allows_reads_failed_allowed() -> None:
    stream = io.StringIO()
    job = Job(id="lint", name="lint", run="x", continue_on_error=True)
    console = Console(stream, live=False, jobs=(job,), tick_s=0)
    attempt = Attempt(1, 0.0, 1.5, 1, FailureKind.TEST_FAILURE, "exit code 1")
    console.job_done(job, JobResult("lint", JobStatus.FAILED, "exit code 1", (attempt,)))
    assert stream.getvalue() == "[lint] failed (allowed) in 1.5 s: exit code 1\n"


def test_a_timeout_says_so_once() -> None:
    stream = io.StringIO()
    job = Job(id="t", name="t", run="x")
    console = Console(stream, live=False, jobs=(job,), tick_s=0)
    attempt = Attempt(1, 0.0, 6.0, None, FailureKind.TIMEOUT, "timed out after 6 s")
    console.job_done(job, JobResult("t", JobStatus.TIMED_OUT, "timed out after 6 s", (attempt,)))
    assert stream.getvalue() == "[t] timed out after 6 s\n"


def test_plain_lines_get_a_heartbeat_for_a_long_quiet_job() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    console = Console(stream, live=False, jobs=JOBS, clock=clock, tick_s=0, heartbeat_s=180)
    train = JOBS[1]
    console.job_started(train, 1)
    console.stage(train, "running", "", usd_per_hour=1.55)
    before = stream.getvalue()
    console.tick(clock.unix + 179)
    assert stream.getvalue() == before  # not yet
    clock.unix += 12 * 60
    console.tick()
    assert stream.getvalue().splitlines()[-1] == "[train] running 12m, $0.3100 so far"
    console.tick()  # just said: not again at once
    assert stream.getvalue().splitlines()[-1] == "[train] running 12m, $0.3100 so far"
    assert stream.getvalue().count("so far") == 1


def test_plain_lines_have_no_colour_unless_forced() -> None:
    job = JOBS[0]
    result = JobResult("build", JobStatus.FAILED, "exit code 1")
    plain, forced = io.StringIO(), io.StringIO()
    Console(plain, live=False, jobs=JOBS, tick_s=0, env={}).job_done(job, result)
    Console(forced, live=False, jobs=JOBS, tick_s=0, env={"FORCE_COLOR": "1"}).job_done(job, result)
    assert "\x1b[" not in plain.getvalue() and "\x1b[" in forced.getvalue()
    no_colour = FakeTty()
    console = quiet_console(FakeClock(), no_colour, env={"NO_COLOR": "1", "TERM": "xterm"})
    console.job_done(job, result)
    console.close()
    # Bold and dim stay (they are not colour); no foreground or background colour is set.
    sgr = re.findall(r"\x1b\[([0-9;]*)m", no_colour.getvalue())
    params = {p for seq in sgr for p in seq.split(";")}
    assert "1" in params and not params & {*map(str, range(30, 50)), *map(str, range(90, 108))}


def test_plain_lines_are_written_as_rich_would_print_them() -> None:
    """Plain lines skip rich's layout (the cost of a run of many short jobs); what reaches the
    log must be byte for byte what rich printed: tabs expanded from the line's start, wide
    characters counted as two columns, lines longer than the width not cut, controls escaped."""
    job = JOBS[0]
    samples = [
        b"a\tb\tc\n",
        b"\xe5\xb9\xb3\tx\n",  # a wide character before a tab
        b"x" * 300 + b"\t|\n",
        b"bell\x07 back\x08 esc\x1b[31mred\x1b[0m \xff\n",
        b"::error::not a command\n",
    ]
    fast = io.StringIO()
    console = Console(fast, live=False, jobs=JOBS, tick_s=0, env={})
    reference = RichConsole(
        file=io.StringIO(), width=120, highlight=False, markup=False, emoji=False, soft_wrap=True
    )
    for data in samples:
        console.output(job, "stdout", data)
    for line in fast.getvalue().splitlines():
        assert line.startswith("[build] ")
    from rich.text import Text

    from runner.live.lines import LineBuffer

    for data in samples:
        (shown,), _ = LineBuffer().feed(data)
        reference.print(Text(f"[build] {shown}"), soft_wrap=True)
    assert isinstance(reference.file, io.StringIO)
    assert fast.getvalue() == reference.file.getvalue()
    assert "\t" not in fast.getvalue()


def test_the_final_table_on_screen_matches_summary_md(tmp_path: Path) -> None:
    pipeline = parse_pipeline(
        "name: end\njobs:\n"
        "  ok: {run: 'echo fine', workspace: false}\n"
        "  lint: {run: 'echo nope; exit 1', workspace: false, continue-on-error: true}\n"
        "  bad: {run: 'echo broken; exit 2', workspace: false}\n",
        "end.yml",
        {},
    )
    stream = FakeTty()
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path)
    with _live_console(stream):
        execute(pipeline, LocalBackend(tmp_path), options, stream)
    term = pyte.Screen(80, 40)
    term.set_mode(pyte.modes.LNM)
    pyte.ByteStream(term).feed(stream.getvalue().encode())
    shown = [line.rstrip() for line in term.display]
    assert all(len(line) <= 80 for line in shown)
    md = (tmp_path / "out" / "summary.md").read_text()
    for name in ("ok", "lint", "bad"):
        cells = next(r for r in md.splitlines() if r.startswith(f"| {name} |")).split(" | ")
        status = cells[1].split(" ", 1)[1]  # without the icon
        time_, rate, cost, tries = cells[4], cells[5], cells[6], cells[7]
        row = next(line for line in shown if line.startswith(f"{name} "))
        assert cells[2] == "–" and rate == "–"  # local: no GPU, no price, so no such columns
        assert re.search(
            rf"^{name}\s+{re.escape(status)}\s+{re.escape(time_)}\s+{re.escape(cost)}\s+{tries}\b",
            row,
        ), (row, cells)
    text = "\n".join(shown)
    assert "failed (allowed)" in text
    assert "bad: last lines of logs/bad.log" in text and "  broken" in text
    assert "failed (1 allowed failure): 1 passed, 2 failed" in text
    assert "reports: " in text


@contextlib.contextmanager
def _live_console(stream: FakeTty) -> Iterator[None]:
    """run_command builds its own Console: make it draw to a fake 80x40 terminal."""
    import runner.engine.run_command as rc

    real = rc.Console

    def fake(*args: object, **kwargs: object) -> Console:
        kwargs.update(width=80, height=40, tick_s=0, env={"TERM": "xterm"})
        return real(*args, **kwargs)  # type: ignore[arg-type]

    rc.Console = fake  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        rc.Console = real  # type: ignore[misc]


def test_a_kill_for_a_timeout_ends_the_attempt_timed_out_not_cancelled(tmp_path: Path) -> None:
    from runner.clock import SYSTEM_CLOCK
    from runner.engine.attempt import AttemptRunner, Kill

    class KilledBackend(LocalBackend):
        def run(self, place, request, sink, cancel, stages=NO_STAGES):  # type: ignore[no-untyped-def]
            return RunOutcome(None, FailureKind.CANCELLED, "cancelled")

    job = Job(id="t", name="t", run="x", workspace=False)
    console = Console(io.StringIO(), live=False, jobs=(job,), tick_s=0)
    runner = AttemptRunner(KilledBackend(tmp_path), tmp_path, SYSTEM_CLOCK, console)
    kill = Kill()
    kill.stop(FailureKind.TIMEOUT)
    ran = runner.run(job, 1, 1, 6.0, kill)
    assert ran.attempt.failure is FailureKind.TIMEOUT
    assert ran.attempt.message == "timed out after 6 s"
    log = (tmp_path / "logs" / "t.log").read_text()
    assert log.splitlines()[-1] == "=== t: attempt 1 timed out after 6 s ==="


def test_a_long_run_shows_the_jobs_that_did_not_pass_and_counts_the_rest() -> None:
    from runner.live.final import MAX_TABLE_ROWS, render_final
    from runner.report.summary_model import parse_summary

    def job(i: int, status: str) -> dict[str, object]:
        return {
            "id": f"j{i}",
            "name": f"j{i}",
            "status": status,
            "duration_s": 1.0,
            "cost_usd": 0.0,
            "attempts": 1,
            "reason": "exit code 1" if status == "failed" else "",
        }

    jobs = [job(i, "failed" if i in (5, 57) else "passed") for i in range(60)]
    summary = {
        "jobs": jobs,
        "status": "failed",
        "jobs_by_status": {"passed": 58, "failed": 2},
        "total_cost_usd": 0.0,
        "duration_s": 60.0,
    }
    rec = RichConsole(width=120, record=True, file=io.StringIO())
    rec.print(render_final(parse_summary(summary), Path("out")))
    lines = rec.export_text().splitlines()
    rows = [line.split()[0] for line in lines if re.match(r"j\d+ ", line)]
    assert len(rows) == MAX_TABLE_ROWS
    assert "j5" in rows and "j57" in rows  # the failed ones, though j57 is past the 40th
    assert rows == sorted(rows, key=lambda r: int(r[1:]))  # still in the run's order
    assert "… and 20 more jobs (20 passed): every job is in summary.md" in lines


class _ClosedPipe(io.StringIO):
    """A stream whose reader went away (`clore-run run … | head -1`): every write fails."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


def test_plain_lines_to_a_closed_pipe_do_not_fail_the_jobs_and_stop_being_tried() -> None:
    stream = _ClosedPipe()
    console = Console(stream, live=False, jobs=JOBS, tick_s=0, env={})
    job = JOBS[0]
    console.job_started(job, 1)  # the first write fails: no exception reaches the run
    console.output(job, "stdout", b"line\n")
    console.job_done(job, JobResult("build", JobStatus.PASSED))
    assert stream.writes == 1  # the console knows the stream is gone: no write after that


def test_at_80_columns_a_rent_ahead_row_says_the_gpu_price_and_its_numbers() -> None:
    """A server rented for a job not started yet: the GPU as people name it (not `NVIDIA
    GeForce R…`), the price whole, and the time/try/cost columns filled."""
    clock = FakeClock()
    jobs = (Job(id="train-rtx-4090-ddp", name="train", run="x"),)
    console = Console(FakeTty(), live=True, jobs=jobs, clock=clock, tick_s=0, width=80, height=24)
    console.stage(jobs[0], "renting", "2x NVIDIA GeForce RTX 4090 #100706", usd_per_hour=0.35)
    (row,) = [line for line in screen_at(console, clock.unix + 12) if line.startswith("train")]
    assert "renting $0.35/h 2x RTX 4090 #100706" in row, row
    assert row.split()[-3:] == ["12s", "1", "$0.0012"], row
    console.close()
