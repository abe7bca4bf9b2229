"""No clore-run process keeps a secret where its jobs can read it: /proc/<pid>/environ (which
shows the environment the process started with) and its memory (non-dumpable)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.processes import default_signals, marked_env

REPO = Path(__file__).resolve().parents[2]
KEY = "ck-live-proc-environ-5e1d"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CLORE_API_KEY", "GITHUB_ACTIONS")}
    return marked_env({**env, "PYTHONPATH": str(REPO), **extra}, inherit=False)


@pytest.mark.slow
def test_a_local_job_cannot_read_the_key_from_its_parent(tmp_path: Path) -> None:
    """`tr '\\0' '\\n' </proc/$PPID/environ` in a job printed the key (into logs/, which CI
    uploads). It must not find it, whether it may read the file (root) or not."""
    seen, parent = tmp_path / "environ.txt", tmp_path / "cmdline.txt"
    (tmp_path / "p.yml").write_text(
        textwrap.dedent(
            f"""\
            jobs:
              peek:
                workspace: false
                run: |
                  tr '\\0' '\\n' < /proc/$PPID/environ > {seen} || true
                  tr '\\0' ' ' < /proc/$PPID/cmdline > {parent}
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "p.yml", "--backend", "local", "--out", "out"],
        cwd=tmp_path,
        env=_env(CLORE_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "runner run p.yml" in parent.read_text()  # the job's parent is clore-run itself
    assert KEY not in seen.read_text()
    assert KEY not in done.stdout + done.stderr


PROBE = textwrap.dedent(
    """
    import ctypes, os, subprocess, sys
    from runner.process_guard import protect
    protect()
    environ = open(f"/proc/{os.getpid()}/environ", "rb").read()
    print("environ-has-key", os.environ["CLORE_API_KEY"].encode() in environ)
    print("python-sees-key", os.environ.get("CLORE_API_KEY") == sys.argv[1])
    print("dumpable", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    child = subprocess.run(["sh", "-c", "echo ${CLORE_API_KEY:-none}"], capture_output=True)
    print("child-sees", child.stdout.decode().strip())
    """
)


def test_the_guard_restarts_without_the_key_and_makes_the_process_non_dumpable() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, KEY],
        env=_env(CLORE_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "environ-has-key False",
        "python-sees-key True",
        "dumpable 0",
        "child-sees none",
    ]


def test_without_a_secret_there_is_no_restart() -> None:
    probe = (
        "from runner.process_guard import protect; import os; protect(); "
        "print(os.environ.get('CLORE_RUN_SECRETS_FD'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "None", done.stderr


LAUNCH_PROBE = textwrap.dedent(
    """
    import ctypes, os, sys
    from runner import launch
    launch.protect(starts_processes=not launch._starts_nothing(sys.argv[1:]))
    environ = open(f"/proc/{os.getpid()}/environ", "rb").read()
    print("restarted", os.environ["CLORE_API_KEY"].encode() not in environ)
    print("dumpable", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    """
)


@pytest.mark.parametrize(
    ("args", "restarted"),
    [
        (["validate", "p.yml"], False),  # starts nothing: no child could read the key
        (["--version"], False),
        (["validate", "--", "p.yml"], True),  # not the plain form: the guard as always
        (["run", "p.yml"], True),
        (["p.yml"], True),
    ],
)
def test_only_commands_that_start_nothing_skip_the_restart(
    args: list[str], restarted: bool
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH_PROBE, *args],
        env=_env(CLORE_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"restarted {restarted}", "dumpable 0"]


# Sends itself Ctrl-C just before the restart's exec: the signal must reach the new process
# (held across the exec) and be answered there, by the entry point's handling.
SIGNAL_PROBE = textwrap.dedent(
    """
    import os, signal, sys
    from runner import process_guard
    restarted = process_guard.SECRETS_FD_VAR in os.environ
    if not restarted:
        real_execve = os.execve
        def execve(*args):
            os.kill(os.getpid(), signal.SIGINT)  # as if it came during the new start-up
            real_execve(*args)
        os.execve = execve
    try:
        process_guard.protect()
    except KeyboardInterrupt:
        print("interrupted in", "the new process" if restarted else "the first process")
        print("still blocked", sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        sys.exit(130)
    print("no interrupt")
    """
)


def test_ctrl_c_during_the_restart_reaches_the_new_process_not_its_start_up() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_PROBE],
        env=_env(CLORE_API_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=default_signals,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stderr
    assert done.stdout.splitlines() == ["interrupted in the new process", "still blocked []"]
