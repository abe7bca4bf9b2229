"""Process checks for tests, and the guard that no process a test starts outlives it.

A test that starts a `clore-run serve`, a pool worker or another long-lived helper gives it the
environment from `marked_env()`: the mark `CLORE_RUN_TEST_PROCESS=<the test's token>` is inherited
by everything below it (the server's jobs too, whatever session they run in). After the test
the guard (an autouse fixture in tests/conftest.py) looks for processes still carrying the
test's mark, kills them and fails the test: one that failed half-way cannot leave a server or
a worker running into the next tests (holding ports, leases, CPU). Only tests that started a
marked process pay for the look (one pass over /proc, a few ms).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import uuid
from collections.abc import Mapping
from pathlib import Path

MARK = "CLORE_RUN_TEST_PROCESS"
_KILL_ROUNDS = 5  # a process may start another between a look and its kill: look again


def alive(pid: int) -> bool:
    """True while `pid` runs. A zombie (dead, not yet reaped by its parent) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Launches:
    """The processes started under one mark at a time: `begin()` a test, `end()` it."""

    def __init__(self) -> None:
        # Outside a test (a module's fixture), the run's own mark: looked for at the end.
        self.session = f"session-{uuid.uuid4().hex}"
        self.token = self.session
        self.launched = False

    def begin(self) -> None:
        self.token = uuid.uuid4().hex
        self.launched = False

    def env(
        self, extra: Mapping[str, str] | None = None, *, inherit: bool = True
    ) -> dict[str, str]:
        """This process's environment (unless not `inherit`), `extra` on top, and the mark."""
        self.launched = True
        return {**(os.environ if inherit else {}), **(extra or {}), MARK: self.token}

    def end(self) -> list[str]:
        """Kill what still carries the test's mark; what was left, for the failure."""
        token, launched = self.token, self.launched
        self.token, self.launched = self.session, False
        return kill_marked(token) if launched else []


def kill_marked(token: str, proc: Path = Path("/proc")) -> list[str]:
    """SIGKILL every process carrying `token`'s mark (one by one: a serve started by a test
    shares the test run's process group); each as `pid: command line`."""
    left: dict[int, str] = {}
    for _ in range(_KILL_ROUNDS):
        found = marked_pids(token, proc)
        if not found:
            break
        for pid in found:
            left.setdefault(pid, _command(proc, pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return [f"{pid}: {command}" for pid, command in sorted(left.items())]


def marked_pids(token: str, proc: Path = Path("/proc")) -> list[int]:
    """The running processes (other than this one) that carry `token`'s mark."""
    mark = f"{MARK}={token}".encode()
    return [pid for pid in _pids(proc) if pid != os.getpid() and mark in _environ(proc, pid)]


def _pids(proc: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(e.name) for e in os.scandir(proc) if e.name.isdigit()]
    return []


def _environ(proc: Path, pid: int) -> list[bytes]:
    try:  # a zombie's reads empty: it has ended; a plain open is half pathlib's cost
        with open(f"{proc}/{pid}/environ", "rb") as environ:
            return environ.read().split(b"\0")
    except OSError:  # gone already, or not ours to read
        return []


def _command(proc: Path, pid: int) -> str:
    try:
        words = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words if w)[:200]


LAUNCHES = Launches()  # the running test's, kept by the guard


def marked_env(extra: Mapping[str, str] | None = None, *, inherit: bool = True) -> dict[str, str]:
    """The environment for a process a test starts: the guard finds it if it outlives the test.
    `inherit=False` for a test that gives its process exactly `extra` (a clean runner's)."""
    return LAUNCHES.env(extra, inherit=inherit)


def ended_owner() -> str:
    """What a ledger row or a pool lease records of a process that has ended (a killed run):
    this host's, with a start time no live process has, so a cleanup proves it dead."""
    from runner import liveness

    here = liveness.current()
    assert here is not None, "no /proc: a holder's liveness cannot be checked here"
    return dataclasses.replace(here, started=-1).text()


# A CI shell that starts a job with `&`, or `nohup`, hands its children SIGINT / SIGHUP ignored,
# and an ignored signal stays ignored across exec (a caught one does not): a process a test means
# to interrupt would shrug the signal off and the test would fail for the harness's sake.
_SIGNALS_A_TEST_SENDS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def default_signals() -> None:
    """`preexec_fn` for a process a test signals: the signals back at their defaults, whatever
    the shell that started pytest ignored (Python then installs its own ^C handler, as in a
    terminal)."""
    for sig in _SIGNALS_A_TEST_SENDS:
        signal.signal(sig, signal.SIG_DFL)
