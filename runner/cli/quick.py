"""`clore-run validate FILE...` answered without loading Typer (and rich): CI and editors run
it often, and Typer's import alone costs more than the whole check.

Only the plain form takes this path: `validate` followed by file names, none of which starts with
`-`, on standard streams that are not ASCII-only. Anything else (an option, `--`, `--help`, no
file) goes through the full command line, so the parser's own messages stay the parser's. On this
path the output, the messages and the exit codes are those of the Typer command, which calls the
same `validate_files`: `echo` writes as click does (ANSI codes stripped when the stream is not a
terminal), a broken pipe exits 1 and Ctrl-C during the check exits 130, as Typer's `main` does.
"""

from __future__ import annotations

import codecs
import errno
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from runner.cli.boundary import EXIT_INTERRUPTED, EXIT_USAGE, Echo, run_inside
from runner.errors import CloreRunError

if TYPE_CHECKING:
    from runner.core.model import Pipeline

_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # what click strips from output that is no tty


def plain_validate(args: list[str]) -> list[Path] | None:
    """The files of a plain `validate FILE...`, else None (take the full command line)."""
    if len(args) < 2 or args[0] != "validate" or any(a.startswith("-") for a in args[1:]):
        return None
    if not (_sane(sys.stdout) and _sane(sys.stderr)):
        return None  # click re-encodes an ASCII stream; leave that to it
    return [Path(a) for a in args[1:]]


def run_validate(paths: list[Path]) -> None:
    """`validate` through the one error boundary, and exit."""
    run_inside(lambda: _guarded_validate(paths), echo)


def validate_files(paths: list[Path], say: Echo) -> int:
    """Check each file: `FILE: ok (N jobs)`, or its FILE:LINE:COL errors. 0, or 2 if any failed."""
    from runner.spec.loader import load_pipeline

    failed = False
    for path in paths:
        try:
            pipeline = load_pipeline(path)
        except CloreRunError as exc:
            from runner.report.github_actions import annotate_spec_error

            say(str(exc), err=True)
            annotate_spec_error(exc)
            failed = True
        else:
            show_warnings(pipeline, say)
            say(f"{path}: ok ({len(pipeline.jobs)} jobs)")
    return EXIT_USAGE if failed else 0


def show_warnings(pipeline: Pipeline, say: Echo) -> None:
    """A valid file's warnings on stderr (and as annotations in GitHub Actions)."""
    from runner.report.github_actions import annotate_spec_warnings

    for warning in pipeline.warnings:
        say(str(warning), err=True)
    annotate_spec_warnings(pipeline.warnings)


def echo(message: str, *, err: bool = False) -> None:
    """click.echo for a str on a sane stream: one line, ANSI codes stripped unless a terminal."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if not _isatty(stream):
        message = _ANSI.sub("", message)
    stream.write(message + "\n")
    stream.flush()


def _guarded_validate(paths: list[Path]) -> int:
    try:
        return validate_files(paths, echo)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = cast(TextIO, _QuietFlush(sys.stdout))
        sys.stderr = cast(TextIO, _QuietFlush(sys.stderr))
        return 1


def _sane(stream: TextIO | None) -> bool:
    encoding = getattr(stream, "encoding", None)
    if stream is None or not encoding:
        return False
    try:
        return codecs.lookup(encoding).name != "ascii"
    except LookupError:
        return False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


class _QuietFlush:
    """A stream whose flush ignores a closed pipe, so that the exit after one is quiet."""

    def __init__(self, wrapped: TextIO) -> None:
        self._wrapped = wrapped

    def flush(self) -> None:
        try:
            self._wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)
