"""What a person watching the run sees: job events, reasons in words, and live output.

On a terminal, a live table (runner/live) is redrawn on a clock, with job output streaming above
it; elsewhere (CI logs) every line is plain and prefixed with its job id, and a job that stays
quiet gets a heartbeat line every few minutes. Console output per job is capped; the log file
always has everything, raw. Text from servers is escaped before it reaches the terminal.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runner import redact
from runner.backends.base import BackendStage, Place, Stream
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.model import Attempt, Job, JobResult, JobStatus
from runner.figures import money
from runner.live import board as B
from runner.live.lines import LineBuffer
from runner.live.words import STATUS_WORDS, clock_time, look, retry_line, seconds
from runner.report.github_actions import print_log_group
from runner.untrusted import console_line

if TYPE_CHECKING:  # rich is imported for a terminal, or for the final table
    from rich.console import Console as RichConsole
    from rich.console import RenderableType
    from rich.live import Live
    from rich.text import Text

    from runner.report.summary_model import Summary

CONSOLE_CAP_BYTES = 1 << 20  # per job; the rest is in logs/<job>.log
HEARTBEAT_S = 180.0  # plain lines: a job quiet this long gets a line saying it is alive
TICK_S = 0.25  # how often the live table is redrawn
PLAIN_WIDTH = 120  # not a terminal (a CI log): the width the final table is laid out for
_RICH_STRIPS = dict.fromkeys((7, 8, 11, 12, 13))  # the control characters rich's Text drops


def _one_line(text: str) -> str:
    """Reasons can carry text from a server: on one line, escaped, none of it can start a
    line that CI reads as a workflow command (`::add-mask::`, `::error::`)."""
    return console_line(" ".join(text.split()))


def _done_words(result: JobResult, status: str, style: str) -> tuple[str, str]:
    """The line of a job that did not pass, and its style (its look's, runner.outcome)."""
    reason = _one_line(result.reason)
    word = STATUS_WORDS[result.status]  # "timed out"
    if reason.startswith(word):
        words = reason + status[len(word) :]  # "timed out after 6 s" once
    else:
        took = f" in {seconds(result.duration_s)}" if result.attempts else ""
        words = f"{status}{took}" + (f": {reason}" if reason else "")
    return words, style


class Console:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        total_jobs: int = 0,
        live: bool | None = None,
        grouped_logs: Path | None = None,
        jobs: Sequence[Job] = (),
        budget_usd: float | None = None,
        name: str = "",
        clock: Clock = SYSTEM_CLOCK,
        tick_s: float = TICK_S,
        heartbeat_s: float = HEARTBEAT_S,
        width: int | None = None,
        height: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`grouped_logs`: in GitHub Actions, the logs folder; each job's log is then printed
        in a collapsible group when the job ends, instead of line by line. `tick_s` 0: no
        redraw thread (tests call `tick` with their own clock)."""
        self.stream = stream or sys.stdout
        self.live = _isatty(self.stream) if live is None else live
        self.grouped_logs = grouped_logs
        self.total = total_jobs or len(jobs)
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.board = B.Board(jobs, budget_usd, name)
        self._width, self._height = width, height
        self._environ = dict(env) if env is not None else None
        # Not a terminal and nothing forcing colour: lines are written as text, without rich.
        self._plain = not self.live and _plain_stream(self.stream, env)
        self._rich: RichConsole | None = None
        self._lock = threading.RLock()
        self._buffers: dict[tuple[str, Stream], LineBuffer] = {}
        self._printed: dict[str, int] = {}
        self._broken = False
        self._t0 = clock.time()
        self._screen: Live | None = None
        self._pending: list[Text] = []
        self._stop = threading.Event()
        if self.live:
            from rich.live import Live  # rich's live display: only a terminal run draws one

            self._screen = Live(
                console=self.out,
                get_renderable=self._renderable,
                auto_refresh=False,
                transient=True,  # the final report takes its place
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._guard(self._screen.start)
        if tick_s > 0 and (self.live or heartbeat_s > 0):
            ticker = threading.Thread(target=self._tick_loop, args=(tick_s,), daemon=True)
            ticker.start()

    @property
    def out(self) -> RichConsole:
        """The rich console, made when first drawn with."""
        if self._rich is None:
            # rich: only when something is drawn (a --json or a quiet run never is)
            from rich.console import Console as RichConsole

            self._rich = RichConsole(
                file=self.stream,
                width=self._width or (None if self.live else PLAIN_WIDTH),
                height=self._height,
                highlight=False,
                markup=False,
                emoji=False,
                soft_wrap=not self.live,  # plain lines are never cut or wrapped by us
                force_interactive=self.live,
                _environ=self._environ,
            )
        return self._rich

    # -- events ----------------------------------------------------------------------------

    def job_started(self, job: Job, attempt: int) -> None:
        with self._lock:
            now = self.clock.time()
            self.board.attempt_started(job, attempt, now)
            if not self.live:
                # The board's row was marked alive at `now` as the attempt entered it.
                self._say(job, f"started (attempt {attempt})" if attempt > 1 else "started")

    def placed(self, job: Job, place: Place) -> None:
        """The attempt holds its place; its script starts next."""
        with self._lock:
            self.board.placed(job, place.name, place.usd_per_hour, self.clock.time())

    def stage(
        self,
        job: Job,
        stage: BackendStage,
        detail: str = "",
        usd_per_hour: float | None = None,
    ) -> None:
        with self._lock:
            self.board.stage(job, stage, detail, self.clock.time(), usd_per_hour)
            if not self.live:
                price = f" at {money(usd_per_hour)}/h" if usd_per_hour is not None else ""
                where = f" {_one_line(detail)}" if detail else ""
                self._line(job, f"{stage}{where}{price}")

    def note(self, job: Job, text: str) -> None:
        """A reason in words from a backend ("sshd never answered ...; trying the next offer")."""
        with self._lock:
            self._line(job, _one_line(text), style="yellow")

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        with self._lock:
            self.board.attempt_ended(job, attempt, self.clock.time())

    def requeued(self, job: Job, at: float) -> None:
        """The failed attempt gets another after a wait: say why, and when."""
        with self._lock:
            now = self.clock.time()
            row = self.board.row(job)
            self.board.waiting(job, at, True, now)
            if row.last_failure is not None:
                words = retry_line(job, row.last_failure, at - now, row.failures)
                self._line(job, _one_line(words), style="yellow")

    def waiting_until(self, job: Job, at: float) -> None:
        """`not-before`: the job is ready but may not start before `at`."""
        with self._lock:
            self.board.waiting(job, at, False, self.clock.time())
            self._line(job, f"waiting until {clock_time(at)} (not-before)")

    def job_done(self, job: Job, result: JobResult) -> None:
        seen = look(job, result)
        status = seen.words
        if result.status is JobStatus.PASSED:  # no reason to clean
            words = f"{status} in {seconds(result.duration_s)}" if result.attempts else status
            style = seen.style
        else:
            words, style = _done_words(result, status, seen.style)
        with self._lock:
            now = self.clock.time()
            self.board.settled(result, status, now)
            if self.grouped_logs is not None:
                self._print_group(job, status)
            self._line(job, words, now, style)

    def notice(self, text: str) -> None:
        """`clore-run: TEXT`; a text already in the shape (`clore-run: ...`, or its `hint: ...`
        line) as it is, never with a second prefix."""
        line = _one_line(text)
        if not line.startswith(("clore-run: ", "hint: ")):
            line = f"clore-run: {line}"
        with self._lock:
            self._emit("", line)

    def hint(self, text: str) -> None:
        """What to do about the notice just said, on a line of its own under it."""
        with self._lock:
            self._emit("", f"hint: {_one_line(text)}")

    def run_exit(self, code: int, line: str, hint: str = "") -> None:
        """The run's last line: why it exits (`exit 1: a job failed`, runner.outcome's words),
        in the message shape when it did not pass, with what to do under it."""
        with self._lock:
            if code == 0:
                self._emit("", _one_line(line), body_style="dim")
                return
        self.notice(line)
        if hint:
            self.hint(hint)

    def idle_cost(self, usd: float) -> None:
        """Cost of servers held with no job on them, for the header's spend."""
        with self._lock:
            self.board.extra_usd = usd

    # -- output ----------------------------------------------------------------------------

    def output(self, job: Job, stream: Stream, data: bytes) -> None:
        if self.grouped_logs is not None:
            return  # printed whole, in a group, when the job ends
        with self._lock:
            shown = self._printed.get(job.id, 0)
            if shown >= CONSOLE_CAP_BYTES:
                return
            self._printed[job.id] = shown + len(data)
            if shown + len(data) >= CONSOLE_CAP_BYTES:
                data += f"\n... more output in logs/{job.id}.log\n".encode()
            buffer = self._buffers.setdefault((job.id, stream), LineBuffer())
            lines, drawing = buffer.feed(data)
            if lines:
                # The other stream's unfinished line (a progress bar on stderr) came first:
                # its state now goes before these lines, not after the job's last words.
                other = self._buffers.get((job.id, "stderr" if stream == "stdout" else "stdout"))
                rest = other.flush() if other is not None else None
                if rest:
                    self._line(job, rest)
            for line in lines:
                self._line(job, line)
            self.board.set_progress(job, drawing)

    def flush_job(self, job: Job) -> None:
        with self._lock:
            for stream in ("stdout", "stderr"):
                buffer = self._buffers.pop((job.id, stream), None)
                rest = buffer.flush() if buffer is not None else None
                if rest:
                    self._line(job, rest)
            self.board.set_progress(job, "")

    # -- the clock -------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        """Redraw the live table, or in plain mode give quiet long jobs a heartbeat line."""
        with self._lock:
            now = self.clock.time() if now is None else now
            if self._screen is not None:
                self._draw()
            elif self.heartbeat_s > 0:
                self._heartbeats(now)

    def _tick_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.tick()

    def _heartbeats(self, now: float) -> None:
        for row in self.board.active():
            since = row.heartbeat_at if row.heartbeat_at is not None else now
            if now - since >= self.heartbeat_s:
                span = now - (row.stage_since or now)
                cost = row.cost_usd(now)
                paid = f", {money(cost)} so far" if cost else ""
                self._line(row.job, f"{row.stage} {int(span // 60)}m{paid}")
                row.heartbeat_at = now

    def renderable(
        self, now: float, width: int | None = None, height: int | None = None
    ) -> RenderableType:
        """The live table at `now` (what the screen shows between lines of output), for this
        terminal's size or the one given."""
        # the board's layout: only a live terminal draws it
        from runner.live.render import render_board

        with self._lock:
            size = self.out.size
            width, height = width or size.width, height or size.height
            return render_board(self.board, now, self._t0, height, width)

    def _renderable(self) -> RenderableType:
        return self.renderable(self.clock.time())

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._screen is not None:
                self._draw()
                self._guard(self._screen.stop)
                self._screen = None

    def final_report(self, summary: Summary, out_dir: Path) -> None:
        """The run's summary on screen: the table of summary.md, the failed jobs' last lines,
        totals, budget and baseline, and where the reports are."""
        with self._lock:
            if self._broken:
                return
            from runner.live.final import render_final  # rich: only where a table is drawn

            self._guard(lambda: self.out.print(render_final(summary, out_dir)))

    # -- drawing (called with the lock held) -----------------------------------------------

    def _line(self, job: Job, text: str, now: float | None = None, style: str = "") -> None:
        """A line of `job`'s; `now` is the time the caller read for the same event, if any."""
        self.board.row(job).heartbeat_at = self.clock.time() if now is None else now
        self._say(job, text, style)

    def _say(self, job: Job, text: str, style: str = "") -> None:
        """A line of `job`'s, when the board has just marked the job alive (`_line` does)."""
        if self._plain:
            self._plain_line(f"[{job.id}] {text}")
        else:
            self._emit(f"[{job.id}] ", text, "dim" if self.live else "", style)

    def _emit(self, head: str, body: str, head_style: str = "", body_style: str = "") -> None:
        if self._plain:
            self._plain_line(head + body)
            return
        self._rich_line(head, body, head_style, body_style)

    def _plain_line(self, line: str) -> None:
        """What rich prints for one soft-wrapped line without colour (a CI log, a pipe), at a
        fraction of the cost: rich lays out every line, and a run of many short jobs spent its
        loop there, holding the lock the jobs' output waits for. Cleaned before it is redacted,
        as rich's Text does; a key replaced by `***` brings back none of what was dropped."""
        if "\t" in line:
            self._rich_line(line, "")
            return
        self._guard(self._write, redact.text(line.translate(_RICH_STRIPS)) + "\n")

    def _rich_line(self, head: str, body: str, head_style: str = "", body_style: str = "") -> None:
        from rich.text import Text  # rich: only when something is drawn

        line = Text(head, style=head_style)
        line.append(body, style=body_style)
        self._print(line)

    def _print(self, text: Text) -> None:
        text.plain = redact.text(text.plain)  # styles stay where they were: a key is one span
        if self._screen is not None:
            # Printed at the next redraw: every print above a live table redraws the table,
            # and 50 jobs printing twice a second each would spend the run redrawing it.
            self._pending.append(text)
            return
        if self.out.color_system is None:
            self._guard(self._write_plain, text)
            return
        text.no_wrap = True
        self._guard(lambda: self.out.print(text, soft_wrap=True))

    def _write_plain(self, text: Text) -> None:
        """A line with tabs and no colour, its tabs expanded as rich expands them."""
        text.expand_tabs(self.out.tab_size)
        self._write(text.plain + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _draw(self) -> None:
        """The lines that came since the last redraw above the table, and the table."""
        screen = self._screen
        if screen is None:
            return
        lines, self._pending = self._pending, []
        if lines:  # printing above the table redraws it too
            from rich.console import Group  # rich: only when something is drawn

            self._guard(lambda: self.out.print(Group(*lines), overflow="fold"))
        else:
            self._guard(screen.refresh)

    def _print_group(self, job: Job, status: str) -> None:
        log = self.grouped_logs / f"{job.id}.log" if self.grouped_logs else None
        if log is not None and log.exists() and not self._broken:
            self._guard(lambda: print_log_group(f"{job.name}: {status}", log, self.stream))

    def _guard(self, draw: Callable[..., object], *args: object) -> None:
        """`draw(*args)`; a closed terminal or pipe (`| head`) must not fail the jobs: the logs
        and reports still get everything."""
        if self._broken:
            return
        try:
            draw(*args)
        except (OSError, ValueError):
            self._broken = True


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False


def _plain_stream(stream: TextIO, env: Mapping[str, str] | None) -> bool:
    """Whether rich would write to `stream` without colour or terminal codes, in UTF-8, and
    its default box: the cases the plain writers reproduce. Anything in doubt is left to rich."""
    environ = os.environ if env is None else env
    if "FORCE_COLOR" in environ or "TTY_COMPATIBLE" in environ or sys.platform == "win32":
        return False
    if hasattr(builtins, "get_ipython"):
        return False  # rich draws for Jupyter
    encoding = (getattr(stream, "encoding", "utf-8") or "utf-8").lower()
    return encoding.startswith("utf") and not _isatty(stream)
