"""The full command line: every command registered on the Typer app, and `clore-run PIPELINE`
read as `clore-run run PIPELINE`."""

from __future__ import annotations

import os

import typer

from runner.cli import (
    cleanup,
    comment,
    doctor,
    gh_runner,
    hosts,
    jobs,
    offers,
    plan,
    pool,
    run,
    schema,
    serve,
    validate,
    warmth,
)
from runner.cli.help_words import plain_metavars
from runner.cli.root import app
from runner.errors import UsageError

for _command in (
    validate,
    plan,
    run,
    schema,
    offers,
    doctor,
    comment,
    cleanup,
    serve,
    jobs,
    pool,
    hosts,
    gh_runner,
    warmth,
):
    _command.register(app)


def run_app(argv: list[str]) -> object:
    """Parse `argv` and run its command; the result (an exit code or None) goes to the boundary."""
    command = typer.main.get_command(app)
    plain_metavars(command)
    if not argv:  # a bare `clore-run`: what it can do, as a success
        argv = ["--help"]
    args = _insert_run(command, argv)
    return command.main(args=args, prog_name="clore-run", standalone_mode=False)


def _insert_run(command: object, argv: list[str]) -> list[str]:
    """`clore-run PIPELINE ...` -> `clore-run run PIPELINE ...`."""
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
