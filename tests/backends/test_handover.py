"""The clean handover between two jobs on one server, on the real sshd: what a job left behind
(processes, its folder, its temp files) is gone before the next job, and a server that cannot
be cleaned is left out, never reused."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from runner.backends.local_orphans import ENV_NAME
from runner.backends.ssh import backend as ssh_backend_module
from runner.backends.ssh import handover as handover_module
from runner.backends.ssh.backend import SshBackend
from runner.core.model import Job
from tests.sshd_fixture import RecordingSink, SshServer, make_request

TOKEN = "handover-test"
MARK = f"{ENV_NAME}={TOKEN}"


def backend_of(server: SshServer, job: Job) -> SshBackend:
    backend = SshBackend.from_flags([server.target], server.client_key)
    backend.book_offer((job,), 1)
    backend.handover_mark = MARK
    return backend


def run_once(backend: SshBackend, job_id: str, script: str, tmp: Path) -> RecordingSink:
    job = Job(id=job_id, name=job_id, run=script)
    place = backend.place(1, job, threading.Event())
    sink = RecordingSink()
    env = {ENV_NAME: TOKEN, "CLORE_RUN_JOB": job_id, "PIDFILE": str(tmp / "pid")}
    request = make_request(script, tmp / "art", env=env, job_id=job_id)
    outcome = backend.run(place, request, sink, threading.Event())
    assert outcome.failure is None, outcome.message
    backend.attempt_done(place)
    return sink


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def test_a_detached_process_a_job_left_is_killed_and_the_host_kept(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    backend = backend_of(sshd_server, Job(id="leaver", name="leaver", run="true"))
    # Not the job's, though it names the same job: another instance's token.
    other = subprocess.Popen(
        ["sleep", "600"], env={**os.environ, ENV_NAME: "another", "CLORE_RUN_JOB": "leaver"}
    )
    try:
        script = 'setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$PIDFILE"'
        run_once(backend, "leaver", script, tmp_path)
        pid = int((tmp_path / "pid").read_text())
        assert not alive(pid)
        assert not backend.lost(1)  # clean after that: the next job may have it
        assert other.poll() is None  # what is not this instance's job's is not touched
    finally:
        other.kill()
        other.wait()
        backend.shutdown()


def test_a_jobs_temp_files_go_with_its_folder(sshd_server: SshServer, tmp_path: Path) -> None:
    backend = backend_of(sshd_server, Job(id="temps", name="temps", run="true"))
    try:
        sink = run_once(backend, "temps", "f=$(mktemp); echo data > $f; echo $f", tmp_path)
        left = sink.stdout.decode().strip()
        assert "/.clore-run/jobs/temps." in left, left
        assert not Path(left).exists()
        assert not backend.lost(1)
    finally:
        backend.shutdown()


def test_a_busy_gpu_fails_the_check(tmp_path: Path) -> None:
    """The check's script as the server runs it, with an nvidia-smi that lists a process
    holding GPU memory (none of the job's processes is left to kill: the GPU is held all the
    same, by something the check cannot see as the job's)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '4242, python3, 1530 MiB'\n")
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    said = subprocess.run(
        ["bash", "-c", handover_module._SCRIPT, "handover", "j", MARK, "j"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "GPU in use: 4242, python3, 1530 MiB" in said
    smi.write_text("#!/bin/sh\nexit 0\n")
    clean = subprocess.run(
        ["bash", "-c", handover_module._SCRIPT, "handover", "j", MARK, "j"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert clean == ""


def test_a_host_that_fails_the_check_is_left_out(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = backend_of(sshd_server, Job(id="gpu", name="gpu", run="true"))
    checked: list[str] = []

    def busy_gpu(conn: object, job_id: str, mark: str) -> str:
        checked.append(job_id)
        return "GPU in use: 4242, python3, 1530 MiB"

    monkeypatch.setattr(ssh_backend_module, "hand_over", busy_gpu)
    try:
        run_once(backend, "gpu", "true", tmp_path)
        assert checked == ["gpu"]
        assert backend.lost(1)  # never given to another job: the core gives it back
    finally:
        backend.shutdown()
