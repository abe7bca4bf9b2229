"""Timing `clore-run` (or any command) as a whole process, the way a user starts it.

Shared by the start-up and local-backend benchmarks, so both measure the same thing: a fresh
process with a warm bytecode cache of its own, no secrets or CI variables in its environment,
wall time from spawn to exit and the CPU of the process and the children it waited for.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# A cache of our own: the first run fills it, and the ones timed start as a user's second run does.
PYCACHE = tempfile.mkdtemp(prefix="bench-pyc-")
atexit.register(shutil.rmtree, PYCACHE, True)

_SECRETS = ("CLORE_API_KEY", "CLORE_RUN_TOKEN", "GITHUB_TOKEN", "CLORE_GITHUB_TOKEN")


def clore_run() -> list[str]:
    """The console script beside this interpreter, else the same entry point by -c."""
    script = shutil.which("clore-run", path=str(Path(sys.executable).parent))
    if script:
        return [sys.executable, script]
    return [sys.executable, "-c", "from runner.launch import main; main()"]


def quiet_env(**extra: str) -> dict[str, str]:
    """This environment without secrets (a registered secret costs redaction work), without
    GitHub Actions' marker (it changes what is printed), and with our bytecode cache."""
    env = {k: v for k, v in os.environ.items() if k not in _SECRETS and k != "GITHUB_ACTIONS"}
    for name in ("PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return {**env, "PYTHONPYCACHEPREFIX": PYCACHE, **extra}


def timed(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: bytes = b"",
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and the children it waited for) of one run,
    which must succeed. `env` defaults to `quiet_env()`."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=dict(quiet_env() if env is None else env), stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.decode()[-2000:]}")
    return took, usage.ru_utime + usage.ru_stime
