"""Which process holds a rental or a pool lease, and whether it is provably alive or dead.

A ledger row and a pool lease record their holder's process: the host, where on it a pid names
one process (the kernel's boot id and the pid namespace: a container has its own pids, a reboot
starts them over), the pid, and the process's start time (clock ticks since boot, field 22 of
`/proc/<pid>/stat`), since a pid is reused once its process is gone. A cleanup on the same host,
boot and namespace can then tell at once:
- dead: no such pid, a zombie, or a pid now held by a process that started at another time;
- alive: that pid, started at that time, still running.
Anywhere else (another machine, another container, a platform without /proc) nothing is proven
either way, and a lease's expiry has to tell instead.

"Dead" needs every fact readable and proving it: the host, the boot id, the pid namespace and
the time namespace (a process in another time namespace sees another boot time, so its start
time reads differently) all equal, and then the pid gone (the kernel says no such process) or
its start time readable and different. A pid whose /proc entry cannot be read (`hidepid=2`
hides other users' processes) but that the kernel still has is not dead: unknown.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class Holder:
    """One process, as a ledger row or a lease records it."""

    host: str
    where: str  # boot id and pid namespace: where `pid` names one process
    pid: int
    started: int  # clock ticks after boot

    def text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        """The holder `text()` wrote, or None (no record, or not one of ours)."""
        try:
            data = json.loads(text or "")
            return cls(
                str(data["host"]), str(data["where"]), int(data["pid"]), int(data["started"])
            )
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def current() -> Holder | None:
    """This process, or None where pids cannot be checked (no /proc)."""
    return _current(os.getpid())


@cache
def _current(pid: int) -> Holder | None:  # per pid: a forked child is another process
    where, started = _where(), _started(pid)
    if where is None or started is None:
        return None
    return Holder(socket.gethostname(), where, pid, started)


def state(holder: Holder | None) -> bool | None:
    """True: provably alive; False: provably dead; None: nothing can be proven from here."""
    here = current()
    if holder is None or here is None or (holder.host, holder.where) != (here.host, here.where):
        return None
    if not _exists(holder.pid):
        return False  # the kernel has no such process in our (its) pid namespace
    started = _started(holder.pid)
    if started is None:
        return None if _hidden(holder.pid) else False  # unreadable, or a zombie (ended)
    return started == holder.started


def _where() -> str | None:
    """Boot id, pid namespace and time namespace: None when any cannot be read (nothing
    can be proven then). A kernel without time namespaces has no ns/time: "-" stands in."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return None
    try:
        time_ns = os.readlink(_PROC / "self/ns/time")
    except FileNotFoundError:
        time_ns = "-"
    except OSError:
        return None
    return f"{boot} {namespace} {time_ns}"


def _exists(pid: int) -> bool:
    """Whether the kernel has `pid` (signal 0 sends nothing): EPERM means it exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _hidden(pid: int) -> bool:
    """`pid` exists but its /proc entry cannot be read (hidepid, another user's process)."""
    return not (_PROC / str(pid) / "stat").exists() or not os.access(
        _PROC / str(pid) / "stat", os.R_OK
    )


def _started(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot); None when it cannot be read or the
    process has ended (a zombie)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after it.
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # a zombie has ended: it bills nothing
        return None
    return int(fields[19])
