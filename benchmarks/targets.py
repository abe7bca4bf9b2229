"""A benchmark's verdict on its targets (design §8).

A full run that misses a target exits 1 naming what it missed, so a regression fails the run
that measured it rather than scrolling past as one more printed figure. `--quick` is a smoke
run (tiny sizes, a busy CI machine): it says what it missed and exits 0, as its figures are not
the ones the targets are about.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable


def verdict(missed: Iterable[str], *, quick: bool) -> None:
    """Exit 1 if a full run missed any target; print each missed one in any case."""
    names = list(missed)
    for name in names:
        print(f"MISSED: {name}", file=sys.stderr)
    if names and not quick:
        sys.exit(1)
