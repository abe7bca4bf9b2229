"""`main()`: the one error boundary of the command line.

No traceback reaches the user for any input. Exit codes: 0 every job passed, 1 a job failed,
2 invalid pipeline or usage, 3 infrastructure, 130 interrupted.
"""

from __future__ import annotations

import os
import sys

import typer

from runner.cli import (
    cleanup,
    comment,
    doctor,
    offers,
    plan,
    pool,
    run,
    schema,
    serve,
    validate,
)
from runner.cli.root import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_USAGE, app
from runner.errors import CloreRunError, UsageError

for _command in (validate, plan, run, schema, offers, doctor, comment, cleanup, serve, pool):
    _command.register(app)


def _insert_run(argv: list[str]) -> list[str]:
    """`clore-run PIPELINE ...` -> `clore-run run PIPELINE ...`."""
    command = typer.main.get_command(app)
    names = set(getattr(command, "commands", {}))
    if argv and argv[0] not in names and not argv[0].startswith("-"):
        _refuse_a_misspelt_command(argv[0], names)
        return ["run", *argv]
    return argv


def _refuse_a_misspelt_command(word: str, commands: set[str]) -> None:
    """`clore-run valdate x.yml` is a command misspelt, not a pipeline called `valdate`: a bare
    word that names no file and is close to a command gets the command suggested."""
    from runner.spec.diagnostics import did_you_mean

    if os.path.exists(word) or "/" in word or "." in word:
        return
    hint = did_you_mean(word, sorted(commands))
    if hint:
        raise UsageError(f"clore-run: '{word}' is not a command", hint)
    raise UsageError(
        f"clore-run: '{word}' is neither a command nor a pipeline file",
        "commands: " + ", ".join(sorted(commands)) + "; see `clore-run --help`",
    )


def _click_exit_code(exc: Exception) -> int | None:
    """Exit code for the parser's own exceptions (usage errors, Abort, Exit), else None.

    Recent Typer versions carry a private copy of click, so these are matched by shape rather
    than by importing click's classes.
    """
    kind = type(exc).__name__
    if kind == "Abort":
        typer.echo("clore-run: interrupted", err=True)
        return EXIT_INTERRUPTED
    if kind == "Exit":
        return int(getattr(exc, "exit_code", 0))
    show = getattr(exc, "show", None)
    if callable(show) and hasattr(exc, "exit_code"):
        show()
        return EXIT_USAGE
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app inside the one error boundary."""
    from runner.report.github_actions import annotate_spec_error, mask_secrets

    mask_secrets()  # before anything else is printed
    command = typer.main.get_command(app)
    try:
        args = _insert_run(list(sys.argv[1:] if argv is None else argv))
        code = command.main(args=args, prog_name="clore-run", standalone_mode=False)
    except CloreRunError as exc:
        typer.echo(f"clore-run: {exc}" if exc.exit_code != EXIT_USAGE else str(exc), err=True)
        annotate_spec_error(exc)
        code = exc.exit_code
    except KeyboardInterrupt:
        typer.echo("clore-run: interrupted", err=True)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the boundary: a bug must not print a traceback at a user
        code = _click_exit_code(exc)
        if code is None:
            if os.environ.get("CLORE_RUN_DEBUG"):
                raise
            typer.echo(
                f"clore-run: internal error: {type(exc).__name__}: {exc} "
                "(set CLORE_RUN_DEBUG=1 for a traceback, and please report it)",
                err=True,
            )
            code = EXIT_INFRA
    sys.exit(code if isinstance(code, int) else 0)
