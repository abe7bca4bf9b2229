"""Local jobs a dead queue server left running, found by a mark in their environment.

The local backend starts each job in a session of its own, so a server killed with SIGKILL
leaves them running with nobody to stop them; requeued as they are, they would run twice. Each
attempt carries `CLORE_RUN_SERVE_INSTANCE=<token>` in its environment (children inherit it), and a
restarted server kills the process groups that carry a dead instance's token (Linux /proc).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path

ENV_NAME = "CLORE_RUN_SERVE_INSTANCE"


def kill_orphans(tokens: Iterable[str], proc: Path = Path("/proc")) -> list[int]:
    """SIGKILL the process groups of processes marked with any of `tokens`; their group ids."""
    marks = {f"{ENV_NAME}={t}".encode() for t in tokens}
    if not marks:
        return []
    own = os.getpgrp()
    killed: set[int] = set()
    for entry in _pids(proc):
        if not marks.intersection(_environ(proc / str(entry))):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(entry)
            if group != own and group not in killed:
                os.killpg(group, signal.SIGKILL)
                killed.add(group)
    return sorted(killed)


def _pids(proc: Path) -> list[int]:
    try:
        return [int(p.name) for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _environ(folder: Path) -> list[bytes]:
    try:
        return (folder / "environ").read_bytes().split(b"\0")
    except OSError:  # gone already, or not ours to read
        return []
