"""The `clore-run` entry point: protect the process's secrets, then run the CLI.

Kept free of imports beyond the standard library, runner.collector, runner.interrupted and
runner.process_guard: the guard may start the process again, and everything imported before that
would be imported twice.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from runner import collector, interrupted
from runner.process_guard import protect


def main() -> None:
    # Until a command takes the signals over (run's stop_on_signals), SIGTERM and SIGHUP stop
    # the process as Ctrl-C does: through the CLI's error boundary, or here while it is still
    # being imported, with exit 130 and one line, never a traceback or a bare -15.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        collector.hold()  # until the work begins (runner.collector)
        protect(starts_processes=not _starts_nothing(sys.argv[1:]))
        # the CLI loads after the guard is up and signals are ours
        from runner.cli import main as cli_main

        cli_main()  # its error boundary maps an interrupt while a command runs
    except KeyboardInterrupt:  # while starting up: the CLI's modules loading, the guard
        interrupted.leave()


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _starts_nothing(args: list[str]) -> bool:
    """`--version` and a plain `validate FILE...`: they print and exit, starting no process
    (a restart to hide the secrets from children would double their time for no one)."""
    return args == ["--version"] or (
        len(args) > 1 and args[0] == "validate" and not any(a.startswith("-") for a in args)
    )
