"""The `clore-run` entry point: protect the process's secrets, then run the CLI.

Kept free of imports beyond the standard library and runner.process_guard: the guard may start
the process again, and everything imported before that would be imported twice.
"""

from __future__ import annotations

import gc
import sys

from runner.process_guard import protect

_collector_held = False  # main() switched the cyclic collector off for the start-up


def main() -> None:
    global _collector_held
    # Start-up makes what lives as long as the command: modules, classes, the pipeline. The
    # cyclic collector's passes over it (dozens while the modules load, one over every object
    # for a big pipeline) free nothing; it stays off until the work begins (`startup_over`).
    gc.disable()
    _collector_held = True
    protect(starts_processes=not _starts_nothing(sys.argv[1:]))
    from runner.cli import main as cli_main

    cli_main()


def _starts_nothing(args: list[str]) -> bool:
    """`--version` and a plain `validate FILE...`: they print and exit, starting no process
    (a restart to hide the secrets from children would double their time for no one)."""
    return args == ["--version"] or (
        len(args) > 1 and args[0] == "validate" and not any(a.startswith("-") for a in args)
    )


def startup_over() -> None:
    """The work begins: what start-up made is kept out of the collector's passes for good
    (gc.freeze) and the collector is on again, if main() switched it off; else nothing."""
    global _collector_held
    if _collector_held:
        _collector_held = False
        gc.freeze()
        gc.enable()
