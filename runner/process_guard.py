"""Keep clore-run's secrets out of reach of the jobs it starts.

A local job runs as the same user as clore-run (in CI often root), so it can read its parent's
`/proc/<pid>/environ`. That file shows the environment the process was *started* with: taking a
variable out of `os.environ` (or `unsetenv`) does not change it. So, first thing, a clore-run
that holds a secret in its environment starts itself again (`execve`, same pid, same arguments)
without it, and reads the secrets back from a pipe that only it holds. The new process keeps them
in `os.environ` for its own code but not in the C environment, so a child started without an
explicit environment does not inherit them either, and the job backends leave them out of the
environments they build. Every secret is also registered for redaction.

Then the process makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent does):
its `/proc` files and its memory become root's alone, and the same user cannot ptrace it. A job
run as root can still read memory; the environment block no longer holds anything to find.
Children are dumpable again after their own exec. Only Linux has `/proc/<pid>/environ` and
prctl; elsewhere nothing is done.

A stop signal (Ctrl-C, SIGTERM, SIGHUP) that comes while the new interpreter starts would meet
no handler of ours: Python's own KeyboardInterrupt, a traceback and exit -2 from inside its
start-up. So those signals are blocked across the exec (the mask and what is pending survive
it) and unblocked once the new process has taken the secrets back, inside the entry point's
handling: a signal sent during the restart is delivered then, and answered as any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys

from runner import redact

SECRETS_FD_VAR = "CLORE_RUN_SECRETS_FD"
# The stop signals the first process blocked for the exec (those it had not blocked already),
# as numbers: the new process unblocks exactly these.
HELD_SIGNALS_VAR = "CLORE_RUN_HELD_SIGNALS"
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
_PR_SET_DUMPABLE = 4
_MAX_PAYLOAD = 60_000  # a pipe holds 64 KiB without a reader; secrets are far smaller


def protect(*, starts_processes: bool = True) -> None:
    """Call before anything else in an entry point (nothing printed yet, no thread started).

    `starts_processes` False (the launcher knows the command runs no job and starts nothing,
    `validate` for one): no restart, since no child is there to read the environment, and
    non-dumpable makes /proc/<pid>/environ root's alone for everyone else."""
    if not sys.platform.startswith("linux"):
        redact.register_from(os.environ)
        return
    handed = os.environ.pop(SECRETS_FD_VAR, None)
    if handed is not None:
        _take_back(handed)
        _release_signals(os.environ.pop(HELD_SIGNALS_VAR, ""))
    else:
        held = {k: os.environ[k] for k in redact.SECRET_ENV_VARS if os.environ.get(k)}
        redact.register_from(held)
        if held and starts_processes:
            _restart_without(held)  # returns only when the exec could not be done
    make_non_dumpable()


def make_non_dumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process. False when the platform refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _restart_without(held: dict[str, str]) -> None:
    payload = json.dumps(held).encode()
    if len(payload) > _MAX_PAYLOAD:
        return
    read_end, write_end = os.pipe()
    os.write(write_end, payload)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    env = {k: v for k, v in os.environ.items() if k not in held}
    env[SECRETS_FD_VAR] = str(read_end)
    sys.stdout.flush()
    sys.stderr.flush()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    env[HELD_SIGNALS_VAR] = ",".join(str(int(s)) for s in sorted(STOP_SIGNALS - before))
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        os.close(read_end)  # carry on as we are: still non-dumpable, still redacted


def _release_signals(held: str) -> None:
    """Unblock the stop signals the first process held across the exec: one sent meanwhile is
    delivered now, to the handlers the entry point has set."""
    numbers = {int(n) for n in held.split(",") if n.isdigit()}
    wanted = {s for s in STOP_SIGNALS if int(s) in numbers}
    if wanted:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)


def _take_back(handed: str) -> None:
    """Read the secrets the first process handed over, into os.environ but not into the C
    environment that children inherit."""
    try:
        fd = int(handed)
        with os.fdopen(fd, "rb") as pipe:
            secrets = json.loads(pipe.read() or b"{}")
    except (ValueError, OSError):
        return
    if not isinstance(secrets, dict):
        return
    for name, value in secrets.items():
        if isinstance(name, str) and isinstance(value, str) and name in redact.SECRET_ENV_VARS:
            os.environ[name] = value
            with contextlib.suppress(OSError):
                os.unsetenv(name)  # os.environ keeps it; a child's environment does not
    redact.register_from(os.environ)
