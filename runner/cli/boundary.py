"""The one error boundary of the command line: every exception becomes a message and an exit code.

No traceback reaches the user for any input. Exit codes: 0 every job passed, 1 a job failed,
2 invalid pipeline or usage, 3 infrastructure, 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from typing import NoReturn, ParamSpec, Protocol, TypeVar

from runner import interrupted
from runner.errors import CloreRunError
from runner.report.github_actions import annotate_spec_error, mask_secrets

P = ParamSpec("P")
R = TypeVar("R")
EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = interrupted.EXIT_INTERRUPTED


class Echo(Protocol):
    def __call__(self, message: str, *, err: bool = ...) -> None: ...


def run_inside(body: Callable[[], object], echo: Echo) -> NoReturn:
    """Run `body` (its int result is the exit code) and exit; `echo` prints the messages."""
    mask_secrets()  # before anything else is printed
    try:
        code = body()
    except CloreRunError as exc:
        echo(said(exc), err=True)
        annotate_spec_error(exc)
        code = exc.exit_code
    except KeyboardInterrupt:
        echo("clore-run: interrupted", err=True)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the boundary: a bug must not print a traceback at a user
        code = _click_exit_code(exc, echo)
        if code is None:
            if os.environ.get("CLORE_RUN_DEBUG"):
                raise
            echo(
                f"clore-run: internal error: {type(exc).__name__}: {exc} "
                "(set CLORE_RUN_DEBUG=1 for a traceback, and please report it)",
                err=True,
            )
            code = EXIT_INFRA
    interrupted.forget_caught_interrupt()  # a run that stopped on Ctrl-C returns 130 too
    sys.exit(code if isinstance(code, int) else 0)


PREFIX = "clore-run: "
HINT = "hint: "


def said(exc: CloreRunError) -> str:
    """Every command's one shape: `clore-run: <what happened>`, then `hint: <what to do>` on a
    line of its own when there is something to do. A pipeline file's problems are located lines
    (`FILE:LINE:COL: key: what (fix)`), the shape compilers and editors read, and stay so."""
    if getattr(exc, "diagnostics", None):
        return str(exc)
    return shaped(exc.message, exc.hint)


def shaped(message: str, hint: str = "") -> str:
    """`clore-run: message` (once, whoever already wrote the prefix) and its `hint:` line."""
    text = message if message.startswith(PREFIX) else PREFIX + message
    return f"{text}\n{HINT}{hint}" if hint else text


def say_errors(command: Callable[P, R]) -> Callable[P, R]:
    """A command that says its own errors in the one shape and exits with their code: the
    same under the boundary and under a bare Typer app (a test's CliRunner, which would
    otherwise report an exception as exit 1)."""

    @functools.wraps(command)
    def said_command(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except CloreRunError as exc:
            import typer  # the command's own parser: loaded already by any command

            typer.echo(said(exc), err=True)
            annotate_spec_error(exc)
            raise typer.Exit(exc.exit_code) from None

    return said_command


def one_of(choices: Iterable[str]) -> str:
    """`must be one of a, b, c`: the choices, listed once."""
    return f"must be one of {', '.join(choices)}"


def _click_exit_code(exc: Exception, echo: Echo) -> int | None:
    """Exit code for the parser's own exceptions (usage errors, Abort, Exit), else None.

    Recent Typer versions carry a private copy of click, so these are matched by shape rather
    than by importing click's classes.
    """
    kind = type(exc).__name__
    if kind == "Abort":
        echo("clore-run: interrupted", err=True)
        return EXIT_INTERRUPTED
    if kind == "Exit":
        return int(getattr(exc, "exit_code", 0))
    show = getattr(exc, "show", None)
    if callable(show) and hasattr(exc, "exit_code"):
        from runner.cli.help_words import reword  # a parse error: only a bad flag pays for it

        reword(exc)
        echo(_usage_words(exc), err=True)
        return EXIT_USAGE
    return None


def _usage_words(exc: Exception) -> str:
    """A bad flag or argument in the one shape: what was wrong, then where the usage is, rather
    than click's `Usage:` block with `Error:` last."""
    format_message = getattr(exc, "format_message", None)
    what = str(format_message() if callable(format_message) else exc)
    # click capitalises its sentences and ends some with a full stop; ours do neither
    what = what[:1].lower() + what[1:].removesuffix(".")
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", "") or "clore-run"
    hint = f"`{path} -h` lists the arguments and options"
    what, _, close = what.partition(" (Possible options: ")
    if close:  # click's guesses belong to what to do, not to what happened
        hint = f"did you mean {' or '.join(close.rstrip(')').split(', '))}? {hint}"
    return shaped(what, hint)
