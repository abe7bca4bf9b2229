"""The `clore-run` entry point: protect the process's secrets, then run the CLI.

Kept free of imports beyond the standard library and runner.process_guard: the guard may start
the process again, and everything imported before that would be imported twice.
"""

from __future__ import annotations

from runner.process_guard import protect


def main() -> None:
    protect()
    from runner.cli import main as cli_main

    cli_main()
