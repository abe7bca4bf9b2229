"""Leaving with the exit code clore-run chose after Ctrl-C (130), never CPython's -2.

A Ctrl-C that clore-run caught and answered (its one line, or a run stopped cleanly) still
ended `python -m runner` by SIGINT (exit -2) after `sys.exit(130)` in 4 plays in 10 of the
fault suite's signal_at_start: CPython keeps a mark that a KeyboardInterrupt went unhandled,
set by the runner of string code (`exec` of a string, which dataclasses and typer use while
modules load) when the interrupt passed through it, and at exit it signals itself when the mark
is set, whoever caught the interrupt since. The same runner clears the mark each time it starts:
running an empty string before leaving does (0 plays in 30 ended -2 since).
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_INTERRUPTED = 130


def forget_caught_interrupt() -> None:
    """Clear CPython's mark of an unhandled KeyboardInterrupt: every caller has handled it."""
    exec("")  # an empty program, run to its end: that is what clears the mark


def leave() -> NoReturn:
    """Say so in one line and exit 130."""
    print("clore-run: interrupted", file=sys.stderr)
    forget_caught_interrupt()
    sys.exit(EXIT_INTERRUPTED)
