"""The plain forms of `validate` and `run` answered without loading Typer: CI and editors run
`validate` often, and the GitHub Action runs `run FILE --backend … --out …`; Typer's import, and
the validator it builds for each option of the command it runs, cost more than the check itself
or than running a hundred short jobs.

Only a plain form takes this path: `validate FILE...`, or `run FILE` with options from a fixed
set, each written `--name VALUE` once (`--job` and `--host` may repeat) with a value that the full
parser would take as it is, on standard streams that are not ASCII-only. Anything else (`--help`,
`--name=value`, `--`, a number that is not plainly one, an unknown option) goes through the full
command line, so the parser's own messages stay the parser's. On this path the output, the
messages and the exit codes are those of the Typer commands, which call the same functions
(`validate_files`, runner.cli.run_flags): `echo` writes as click does (ANSI codes stripped when the
stream is not a terminal), a broken pipe exits 1 and Ctrl-C exits 130, as Typer's `main` does.
"""

from __future__ import annotations

import codecs
import errno
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from runner.cli.boundary import EXIT_INTERRUPTED, EXIT_USAGE, Echo, run_inside
from runner.errors import CloreRunError

if TYPE_CHECKING:
    from runner.core.model import Pipeline

_ANSI = r"\033\[[;?0-9]*[a-zA-Z]"  # what click strips from output that is no tty


def plain_validate(args: list[str]) -> list[Path] | None:
    """The files of a plain `validate FILE...`, else None (take the full command line)."""
    if len(args) < 2 or args[0] != "validate" or any(a.startswith("-") for a in args[1:]):
        return None
    if not (_sane(sys.stdout) and _sane(sys.stderr)):
        return None  # click re-encodes an ASCII stream; leave that to it
    return [Path(a) for a in args[1:]]


def run_validate(paths: list[Path]) -> None:
    """`validate` through the one error boundary, and exit."""
    run_inside(lambda: _as_typer_main(lambda: validate_files(paths, echo)), echo)


_RUN_VALUES = {  # option -> (RunFlags field, may repeat, the values the full parser takes as such)
    "--backend": ("backend", False, re.compile("local|ssh|clore")),
    "--out": ("out", False, re.compile("[^-].*", re.S)),
    "--concurrency": ("concurrency", False, re.compile("[1-9][0-9]{0,5}")),
    "--budget": ("budget", False, re.compile("(0|[1-9][0-9]{0,8})(\\.[0-9]{1,6})?")),
    "--job": ("job", True, re.compile("[^-].*", re.S)),
    "--baseline": ("baseline", False, re.compile("[^-].*", re.S)),
    "--host": ("host", True, re.compile("[^-].*", re.S)),
    "--identity": ("identity", False, re.compile("[^-].*", re.S)),
    "--ledger": ("ledger", False, re.compile("[^-].*", re.S)),
    "--pool": ("pool", False, re.compile("[^-].*", re.S)),
    "--coordinator": ("coordinator", False, re.compile("[^-].*", re.S)),
}


def plain_run(args: list[str]) -> dict[str, Any] | None:
    """The flags of a plain `run FILE [--option VALUE]...` as RunFlags fields, else None."""
    if len(args) < 2 or args[0] != "run" or not _sane(sys.stdout) or not _sane(sys.stderr):
        return None
    fields: dict[str, Any] = {}
    rest = args[1:]
    while rest:
        word = rest.pop(0)
        if not word.startswith("-"):
            if "pipeline" in fields:
                return None
            fields["pipeline"] = word
            continue
        spec = _RUN_VALUES.get(word)
        if spec is None or not rest:
            return None
        name, repeats, shape = spec
        value = rest.pop(0)
        if not shape.fullmatch(value) or (name in fields and not repeats):
            return None
        if repeats:
            fields.setdefault(name, []).append(value)
        else:
            fields[name] = value
    return fields if "pipeline" in fields else None


def run_run(fields: dict[str, Any]) -> None:
    """`run` through the one error boundary, and exit."""
    from runner.cli.run_flags import BackendName, RunFlags, run_with

    typed: dict[str, Any] = dict(fields)
    for name in ("pipeline", "out", "baseline", "identity"):
        if name in typed:
            typed[name] = Path(typed[name])
    if "backend" in typed:
        typed["backend"] = BackendName(typed["backend"])
    if "concurrency" in typed:
        typed["concurrency"] = int(typed["concurrency"])
    if "budget" in typed:
        typed["budget"] = float(typed["budget"])
    flags = RunFlags(**typed)
    run_inside(lambda: _as_typer_main(lambda: run_with(flags, echo)), echo)


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
    if not pipeline.warnings:
        return  # the usual case: the Actions module (and the reports it imports) stays out
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
        message = re.sub(_ANSI, "", message)
    stream.write(message + "\n")
    stream.flush()


def _as_typer_main(body: Callable[[], int]) -> int:
    """`body()`, with the exceptions Typer's `main` turns into exit codes turned alike."""
    try:
        return body()
    except EOFError:
        print(file=sys.stderr)
        raise KeyboardInterrupt from None  # the boundary: "clore-run: interrupted", 130
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
