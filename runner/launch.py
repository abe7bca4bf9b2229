"""The `clore-run` entry point: protect the process's secrets, then run the CLI.

Kept free of imports beyond the standard library, runner.collector and runner.process_guard: the
guard may start the process again, and everything imported before that would be imported twice.
"""

from __future__ import annotations

import sys

from runner import collector
from runner.process_guard import protect


def main() -> None:
    collector.hold()  # until the work begins (runner.collector)
    protect(starts_processes=not _starts_nothing(sys.argv[1:]))
    from runner.cli import main as cli_main

    cli_main()


def _starts_nothing(args: list[str]) -> bool:
    """`--version` and a plain `validate FILE...`: they print and exit, starting no process
    (a restart to hide the secrets from children would double their time for no one)."""
    return args == ["--version"] or (
        len(args) > 1 and args[0] == "validate" and not any(a.startswith("-") for a in args)
    )
