"""The one error boundary of the command line: every exception becomes a message and an exit code.

No traceback reaches the user for any input. Exit codes: 0 every job passed, 1 a job failed,
2 invalid pipeline or usage, 3 infrastructure, 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn, Protocol

from runner import interrupted
from runner.errors import CloreRunError
from runner.report.github_actions import annotate_spec_error, mask_secrets

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
        echo(f"clore-run: {exc}" if exc.exit_code != EXIT_USAGE else str(exc), err=True)
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
        from runner.cli.help_words import reword

        reword(exc)
        show()
        return EXIT_USAGE
    return None
