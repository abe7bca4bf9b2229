"""A real OpenSSH sshd on loopback, for the SSH tests and benchmarks.

Everything it uses lives under a temporary folder: its config, a host key and an authorized_keys
made for this session, and the client key the tests log in with. The machine's own sshd and
/etc/ssh are never touched. sshd runs as the current user (root in CI), key auth only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner.backends.base import RunRequest, Stream
from runner.backends.ssh.connection import Endpoint, SshConnection, connect
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import Job
from tests.orphan_guard import Guard, guard

SSHD = "/usr/sbin/sshd"
_START_TIMEOUT_S = 10.0

_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {dir}/host_ed25519
AuthorizedKeysFile {dir}/authorized_keys
PidFile none
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
UseDNS no
MaxSessions 50
MaxStartups 50:30:100
Subsystem sftp internal-sftp
SetEnv HOME={dir}/home PATH={path}
LogLevel ERROR
"""


@dataclass
class SshServer:
    """A running sshd and what a client needs to reach it."""

    port: int
    folder: Path
    client_key: Path  # an OpenSSH private key file, authorized on this server
    process: subprocess.Popen[bytes]
    user: str = "root"
    host: str = "127.0.0.1"
    guard: Guard | None = None  # kills sshd and its sessions if the test run dies first

    @property
    def target(self) -> str:
        """The `--host` form: USER@HOST:PORT."""
        return f"{self.user}@{self.host}:{self.port}"

    def authorize(self, public_line: str) -> None:
        """Accept one more client key (sshd rereads authorized_keys at every login)."""
        with (self.folder / "authorized_keys").open("a") as f:
            f.write(public_line.strip() + "\n")

    def stop(self) -> None:
        """Stop the listener by its pid; sessions end with their connections."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.release()

    def release(self) -> None:
        """Stopped cleanly: the watchdog may go."""
        if self.guard is not None:
            self.guard.release()

    def signal_all(self, sig: int) -> None:
        """Signal the listener and every process under it (sshd gives each login its own
        session, so a process group signal would miss them)."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def freeze(self) -> None:
        """Stop (SIGSTOP) every sshd process: the TCP connection stays up, but nothing answers,
        as when a network path dies silently. Jobs keep running. `kill_all` cleans up."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(pid, signal.SIGSTOP)
            except (OSError, ProcessLookupError):
                pass

    def kill_all(self) -> None:
        """The server is gone: kill sshd with every session and job under it."""
        self.signal_all(signal.SIGKILL)
        self.process.wait(timeout=5)
        self.release()


def descendants(pid: int) -> list[int]:
    """All processes below `pid`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def write_private_key(path: Path) -> str:
    """A new ed25519 key in OpenSSH format at `path` (mode 600); returns its public line."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode() + " clore-run-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_sshd(
    folder: Path, client_key: Path | None = None, port: int | None = None, *, own_bin: bool = False
) -> SshServer:
    """Start sshd with its files under `folder`; authorize `client_key` (made if None).
    `own_bin`: sessions find commands in `folder`/bin first (a host's own tools, which a test
    may put there: an nvidia-smi, say)."""
    if not Path(SSHD).exists():
        pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server)")
    folder.mkdir(parents=True, exist_ok=True)
    write_private_key(folder / "host_ed25519")
    if client_key is None:
        client_key = folder / "client_ed25519"
        public = write_private_key(client_key)
    else:
        public = _public_line(client_key)
    (folder / "authorized_keys").write_text(public + "\n")
    # Sessions get a HOME of their own: job folders stay under tmp, and the login shell skips
    # the machine user's ~/.bashrc (bash sources it for ssh sessions; pyenv's costs ~100 ms).
    (folder / "home").mkdir(exist_ok=True)
    _ensure_privsep_dir()
    for _ in range(5):  # a free port can be taken between our probe and sshd's bind
        chosen = port or free_port()
        config = folder / "sshd_config"
        path = f"{folder / 'bin'}:{_session_path()}" if own_bin else _session_path()
        config.write_text(_CONFIG.format(port=chosen, dir=folder, path=path))
        with (folder / "sshd.log").open("ab") as log_file:  # sshd keeps its own copy of it
            process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stderr=log_file,
                start_new_session=True,
            )
        if _wait_until_listening(chosen, process):
            return SshServer(
                chosen, folder, client_key, process, guard=guard("tree", str(process.pid))
            )
        if port is not None:
            break
    log = (folder / "sshd.log").read_text(errors="replace")
    raise RuntimeError(f"sshd did not start: {log[-2000:]}")


def _public_line(private_key: Path) -> str:
    key = serialization.load_ssh_private_key(private_key.read_bytes(), password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def _session_path() -> str:
    """PATH for sessions: the tests' own Python first, so jobs on this loopback "server" find
    the same python3 (and pytest) as a job run with --backend local does."""
    system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return f"{Path(sys.executable).parent}:{system}"


def _ensure_privsep_dir() -> None:
    """sshd running as root refuses to start without its (empty) privilege separation folder,
    which the distribution only creates when its own service starts."""
    if os.geteuid() == 0 and not Path("/run/sshd").exists():
        Path("/run/sshd").mkdir(mode=0o755)


def _wait_until_listening(port: int, process: subprocess.Popen[bytes]) -> bool:
    """Poll until sshd sends its banner, it exits (False), or the bounded wait ends."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.02)  # between polls of a port; not waiting for a result
    process.kill()
    return False


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """One sshd for the whole test session."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def sshd_killable(tmp_path: Path) -> Iterator[SshServer]:
    """An sshd of the test's own, to kill or freeze mid-job; cleaned up whatever happened."""
    server = start_sshd(tmp_path / "sshd")
    yield server
    server.kill_all()


@pytest.fixture(scope="session")
def ssh_key(sshd_server: SshServer) -> ClientKey:
    """The client key the session's sshd accepts."""
    return ClientKey.from_file(sshd_server.client_key)


@pytest.fixture(scope="session")
def ssh_conn(sshd_server: SshServer, ssh_key: ClientKey) -> Iterator[SshConnection]:
    """One connection to the session's sshd, shared like a backend shares it between jobs."""
    conn = connect(Endpoint("127.0.0.1", sshd_server.port), ssh_key, HostKeyStore())
    yield conn
    conn.close()


class RecordingSink:
    """An OutputSink that keeps everything and can wait (bounded) for a marker in stdout."""

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._changed = threading.Condition()

    def write(self, stream: Stream, data: bytes) -> None:
        with self._changed:
            (self.stdout if stream == "stdout" else self.stderr).extend(data)
            self._changed.notify_all()

    def wait_for(self, marker: bytes, timeout_s: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: marker in self.stdout, timeout_s)


def make_request(
    script: str,
    artifacts_dir: Path,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    workspace: Path | None = None,
    files: tuple[str, ...] = (),
    artifacts: tuple[str, ...] = (),
    junit: str | None = None,
    job_id: str = "job",
) -> RunRequest:
    """A RunRequest for `script`, the way the engine would build one."""
    job = Job(id=job_id, name=job_id, run=script, artifacts=artifacts, junit=junit)
    return RunRequest(
        job=job,
        attempt=1,
        env=env or {},
        workspace_root=workspace,
        workspace_files=files,
        artifacts_dir=artifacts_dir,
        timeout_s=timeout_s,
    )
