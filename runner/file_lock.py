"""One process at a time on a folder or a database file: an exclusive flock on a lock file,
held for as long as the returned file is open (the kernel drops it when the process dies)."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path
from typing import IO

from runner.errors import UsageError


def hold_lock(
    path: Path, cannot_write: Callable[[OSError], UsageError], taken: UsageError
) -> IO[bytes]:
    """`path` (its folder made if need be) open and locked; `cannot_write(error)` is raised when
    it cannot be made, `taken` when another process holds it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = path.open("ab")
    except OSError as exc:
        raise cannot_write(exc) from None
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        file.close()
        raise taken from None
    return file
