"""A watchdog for the servers a test run starts (sshd, the PostgreSQL cluster): when the run dies
without stopping them (pytest killed with SIGKILL, a CI timeout), the watchdog does.

Those servers outlive the run by design: sshd runs in a session of its own and `pg_ctl` hands
the postmaster to init, so neither a process-group signal nor PR_SET_PDEATHSIG reaches them
(and `pg_ctl restart` starts a new postmaster that no death signal was ever set on). The
watchdog is a small process in a session of its own, reading a pipe whose only writer is the
test run: end of file without the word `done` means the run is gone, and the watchdog kills
what it guards. A guarded process is named by its pid and its start time (/proc/<pid>/stat),
so a pid the kernel has reused since is never signalled.

Run as a script (`python -S tests/orphan_guard.py tree PID` or `... postgres DATA FOLDER`),
stdlib only, so it starts in a few milliseconds; `guard()` starts it from a fixture.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

DONE = b"done\n"


class Guard:
    """The test run's end of the pipe. `release()` after a clean stop: the watchdog leaves."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def release(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.write(DONE)
                stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def guard(*args: str) -> Guard:
    """Watch over `args` (`tree PID` or `postgres DATA FOLDER`) until released."""
    process = subprocess.Popen(
        [sys.executable, "-S", __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the run's process group must not end it first
        close_fds=True,
    )
    return Guard(process)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def tree(pid: int) -> list[int]:
    """`pid` and every process below it, parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, started: str | None) -> None:
    if started is None or start_time(pid) != started:
        return  # gone already, or the pid is another process's now
    for each in tree(pid):
        with contextlib.suppress(OSError):
            os.kill(each, signal.SIGKILL)


def stop_postgres(data: Path, folder: Path) -> None:
    """SIGQUIT to the postmaster is `pg_ctl stop -m immediate`: it ends every backend."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while start_time(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the postmaster's own exit; nothing to wait on
        if start_time(pid) is not None:
            kill_tree(pid, start_time(pid))
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # the run's temp folder, if the cluster was all it held


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the run's terminal is the run's
    kind, args = argv[0], argv[1:]
    started = start_time(int(args[0])) if kind == "tree" else None
    said = sys.stdin.buffer.read()  # until the run releases us or dies
    if said == DONE:
        return
    if kind == "tree":
        kill_tree(int(args[0]), started)
    elif kind == "postgres":
        stop_postgres(Path(args[0]), Path(args[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
