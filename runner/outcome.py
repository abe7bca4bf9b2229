"""How a job's outcome reads for a person, in one place: its words (`timed out (allowed)`), its
mark in Markdown, its colour on a terminal, in an SVG and on the dashboard.

Every writer (the console, summary.md, JUnit's `clore.status`, the timeline, the dashboard, the
PR comment, `clore-run jobs`) asks here, so the same job reads the same way in each: a failure
`continue-on-error` allows is "failed (allowed)" with the amber look everywhere, a flaky pass is
"passed (flaky)", a timeout is "timed out" (never a signal number). Stdlib only: the reports,
the live view and the dashboard all import it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Tone = Literal["good", "bad", "timeout", "allowed", "stopped", "skipped"]

# Status as stored (summary.json, the queue) -> as said.
STATUS_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "timed_out": "timed out",
    "error": "error",
    "skipped": "skipped",
    "cancelled": "cancelled",
    "interrupted": "interrupted",
    "queued": "queued",
    "running": "running",
}
# After a count: `2 errored`, not `2 error`.
COUNTED_WORDS = {**STATUS_WORDS, "error": "errored"}
BAD_STATUSES = ("failed", "timed_out", "error")
ALLOWED = " (allowed)"
FLAKY = " (flaky)"

_TONE_OF_STATUS: dict[str, Tone] = {
    "passed": "good",
    "failed": "bad",
    "timed_out": "timeout",
    "error": "bad",
    "skipped": "skipped",
    "cancelled": "stopped",
    "interrupted": "stopped",
}

# Markdown marks (summary.md, the step summary, the PR comment).
MARKS = {
    "passed": "✅",
    "failed": "❌",
    "timed_out": "⏱️",
    "error": "⚠️",
    "skipped": "⏭️",
    "cancelled": "🚫",
    "interrupted": "⏹️",
}
ALLOWED_MARK = "🟡"  # an allowed failure: not the ❌ of one that failed the run

# One colour per tone in each medium: a terminal (rich styles), an SVG (hex) and the dashboard
# (a CSS class, its colours in style.css).
RICH_STYLES: dict[Tone, str] = {
    "good": "green",
    "bad": "bold red",
    "timeout": "bold dark_orange",
    "allowed": "yellow",
    "stopped": "yellow",
    "skipped": "dim",
}
HEX_COLOURS: dict[Tone, str] = {
    "good": "#2da44e",
    "bad": "#cf222e",
    "timeout": "#bc4c00",
    "allowed": "#d4a72c",
    "stopped": "#8c959f",
    "skipped": "#d0d7de",
}
RETRIED_HEX = "#ff8182"  # an attempt that failed and was followed by another: a lighter red
SETUP_HEX = "#afb8c1"  # getting a place (renting, booting, connecting)


class Outcome(NamedTuple):
    """A job's end as a person reads it."""

    status: str  # as stored: "timed_out"
    allowed: bool = False  # failed, timed out or errored, and continue-on-error lets it pass
    flaky: bool = False  # passed, but only after a retry

    @property
    def words(self) -> str:
        """`passed`, `passed (flaky)`, `timed out (allowed)`."""
        text = status_words(self.status)
        if self.allowed:
            return text + ALLOWED
        return text + FLAKY if self.flaky else text

    @property
    def tone(self) -> Tone:
        if self.allowed:
            return "allowed"
        return _TONE_OF_STATUS.get(self.status, "stopped")

    @property
    def mark(self) -> str:
        return ALLOWED_MARK if self.allowed else MARKS.get(self.status, "•")

    @property
    def style(self) -> str:
        return RICH_STYLES[self.tone]

    @property
    def colour(self) -> str:
        return HEX_COLOURS[self.tone]

    @property
    def css(self) -> str:
        """The dashboard's class for this look: `tone-allowed`."""
        return f"tone-{self.tone}"


def outcome(status: object, *, allowed: bool = False, flaky: bool = False) -> Outcome:
    """The outcome of a status (an enum or its value); `allowed` counts only for a failure."""
    word = str(getattr(status, "value", status))
    return Outcome(word, allowed and word in BAD_STATUSES, flaky and word == "passed")


def status_words(status: object) -> str:
    """`timed_out` -> `timed out`."""
    word = str(getattr(status, "value", status))
    return STATUS_WORDS.get(word, word.replace("_", " "))


def counted(status: object) -> str:
    """A status after a count: `2 errored`, `3 timed out`."""
    word = str(getattr(status, "value", status))
    return COUNTED_WORDS.get(word, word.replace("_", " "))


def run_line(status: object, allowed_failures: int = 0) -> str:
    """The run's one-line result: `passed`, `errored`, or `passed (1 allowed failure)` when
    continue-on-error let some failures pass, so a reader of the line alone is not misled."""
    word = str(getattr(status, "value", status))
    text = RUN_WORDS.get(word) or status_words(word)
    if allowed_failures:
        text += f" ({allowed_failures} allowed failure{'s' if allowed_failures != 1 else ''})"
    return text


# -- the run ---------------------------------------------------------------------------------

# A run's status (summary.json's `status`) as its one-line result says it: a past participle
# as a job's counts are said (`1 errored`), never `error:` at a line's start, which reads as a
# message of another shape.
RUN_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "errored",
    "interrupted": "interrupted",
}

# The line naming the servers a run rented and gave back, with what each cost: on screen as the
# run ends and beside the cost in summary.md, whatever ended the run (a Ctrl-C included).
GIVEN_BACK = "rented and given back: "

# The exit code of a run, by its status (an order that may be ours left running, or a signal
# after the jobs ended, changes it: the run's end decides, summary.json keeps what it decided).
RUN_EXIT_CODES = {"passed": 0, "failed": 1, "error": 3, "interrupted": 130}
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# Why clore-run exits, by exit code: the run's last line on screen, summary.md (and so the PR
# comment and the step summary that carry it), `--help`. summary.json keeps the code.
EXIT_REASONS = {
    EXIT_PASSED: "every job passed",
    EXIT_FAILED: "a job failed",
    EXIT_USAGE: "invalid input",
    EXIT_INFRA: "infrastructure stopped a job, not its code",
    EXIT_INTERRUPTED: "interrupted",
}
_PASSED_ALLOWED = "every job passed or failed as allowed"
# What to do, by exit code, said under the last line of a run that did not pass.
EXIT_HINTS = {
    EXIT_FAILED: "the failed jobs' last lines are above; their whole logs are in {out}logs/",
    EXIT_INFRA: "the cause is on its job's line above; fix it and run again",
}


def run_exit_code(status: object) -> int:
    """The exit code a run with this status ends with (3 for a status this version lacks)."""
    return RUN_EXIT_CODES.get(str(getattr(status, "value", status)), EXIT_INFRA)


def exit_reason(code: int, allowed_failures: int = 0) -> str:
    """Why a run exits with `code`: `a job failed`; a pass with allowed failures says so."""
    if code == EXIT_PASSED and allowed_failures:
        return _PASSED_ALLOWED
    return EXIT_REASONS.get(code, "an exit code this version does not know")


def exit_line(code: int, allowed_failures: int = 0) -> str:
    """`exit 1: a job failed`: the run's last line on screen; summary.md says the same."""
    return f"exit {code}: {exit_reason(code, allowed_failures)}"


def exit_hint(code: int, out_dir: str = "") -> str:
    """What to do after a run that exits `code` ("" when there is nothing to do); a backend
    may know better for exit 3 (its spec's `exit_hint`)."""
    return EXIT_HINTS.get(code, "").format(out=out_dir)


def exit_codes_help() -> str:
    """`0 every job passed; 1 a job failed; ...`: the codes as `--help` lists them."""
    return "; ".join(f"{code} {reason}" for code, reason in EXIT_REASONS.items())
