"""A private PostgreSQL cluster on loopback, for the store, pool and serve tests.

It lives under a temporary folder: `initdb` makes it, `pg_ctl -w` starts it on a free 127.0.0.1
port and stops it when the session ends. Debian's binaries (/usr/lib/postgresql/<v>/bin) are
used; as root they run as the `postgres` user, since PostgreSQL refuses to run as root. The
machine's own clusters are never touched. Each test gets a database of its own.

Where no server can be started (no binaries, no psycopg), the tests that need one skip and say
why; `.ci/run` installs Debian's `postgresql` so that CI never skips them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.orphan_guard import Guard, guard
from tests.sshd_fixture import free_port

_BIN_ROOT = Path("/usr/lib/postgresql")
_START_TIMEOUT_S = 60


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = sorted(
        (p for p in _BIN_ROOT.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


@dataclass
class PgCluster:
    """A running cluster: superuser `postgres`, trust auth on loopback only."""

    bin: Path
    folder: Path
    port: int
    user: str | None  # the OS user it runs as (None: ourselves)
    guard: Guard | None = None  # stops it and removes its folder if the test run dies first
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def pg_ctl(self, *args: str) -> None:
        log = self.folder / "server.log"
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(log), *args]
        subprocess.run(command, check=True, capture_output=True, user=self.user, timeout=90)

    def restart_immediate(self) -> None:
        """A crash and recovery: `-m immediate` aborts every backend without a checkpoint."""
        self.pg_ctl("restart", "-m", "immediate", "-w", "-t", str(_START_TIMEOUT_S))

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.pg_ctl("stop", "-m", "fast", "-w")
        if self.guard is not None:
            self.guard.release()


def start_cluster(folder: Path) -> PgCluster:
    """initdb + pg_ctl start under `folder`, or pytest.skip saying why it cannot."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install -e '.[postgres]')")
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip(f"no PostgreSQL under {_BIN_ROOT} (apt-get install postgresql)")
    user = _run_as()
    folder.mkdir(parents=True, exist_ok=True)
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    data = folder / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-N"]
    done = subprocess.run(initdb, capture_output=True, text=True, user=user, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"initdb failed: {done.stderr.strip()[-500:]}")
    for _ in range(5):  # a free port can be taken between our probe and the server's bind
        port = free_port()
        conf = (
            "listen_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{folder}'\n"
            "max_connections = 200\n"
            "fsync = off\n"  # a test cluster: crash recovery from WAL still works (-m immediate)
            "log_min_messages = warning\n"
        )
        (data / "postgresql.auto.conf").write_text(conf)
        cluster = PgCluster(bin_dir, folder, port, user)
        # Watching before the start: a run killed while pg_ctl waits leaves nothing either.
        cluster.guard = guard("postgres", str(data), str(folder))
        try:
            cluster.pg_ctl("start", "-w", "-t", str(_START_TIMEOUT_S))
        except subprocess.CalledProcessError:
            cluster.guard.release()
            continue
        return cluster
    log = (folder / "server.log").read_text(errors="replace") if folder.exists() else ""
    pytest.skip(f"PostgreSQL did not start: {log[-1000:]}")


def _run_as() -> str | None:
    """PostgreSQL will not run as root: as root, use the `postgres` user Debian creates."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no `postgres` user to run PostgreSQL as")
    return "postgres"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    folder = Path(tempfile.mkdtemp(prefix="clore-run-pg-"))
    folder.chmod(0o755)
    try:
        cluster = start_cluster(folder / "cluster")
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """A fresh database on the session's cluster."""
    return pg_cluster.new_database()
