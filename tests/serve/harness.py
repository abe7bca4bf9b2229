"""Queue servers for tests, over real HTTP on loopback: in a thread (with an injectable clock and
backend) or as a `clore-run serve` subprocess (for restarts)."""

from __future__ import annotations

import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import requests
import uvicorn

from runner.backends.base import Backend
from runner.backends.local import LocalBackend
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.warm_policy import COLD, WarmPolicy
from runner.serve.app import create_app
from runner.serve.service import Service, ServiceOptions
from runner.stores.queue.sqlite import SqliteQueue
from tests.processes import default_signals, marked_env

TOKEN = "t-" + secrets.token_urlsafe(24)
FINAL = {"passed", "failed", "timed_out", "error", "skipped", "cancelled"}


def wait_until(check: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.01)


@dataclass
class Api:
    """A requests session on a server's URL, authenticated unless told otherwise."""

    url: str
    token: str | None = TOKEN
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"

    def request(self, method: str, path: str, **kw: Any) -> requests.Response:
        return self.session.request(method, self.url + path, timeout=30, **kw)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def submit(self, yaml_text: str, **params: Any) -> list[str]:
        reply = self.request(
            "POST",
            "/pipelines",
            data=yaml_text.encode(),
            params=params,
            headers={"Content-Type": "application/yaml"},
        )
        assert reply.status_code == 201, reply.text
        ids: list[str] = reply.json()["ids"]
        return ids

    def job(self, job_id: str) -> dict[str, Any]:
        reply = self.get(f"/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def status(self, job_id: str) -> str:
        return str(self.job(job_id)["status"])

    def wait_status(self, job_id: str, wanted: set[str], timeout: float = 15.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in wanted else None

        result: dict[str, Any] = wait_until(check, timeout, f"{job_id} in {wanted}")
        return result


@dataclass
class ThreadServer:
    service: Service
    api: Api
    server: uvicorn.Server


@contextmanager
def thread_server(
    tmp: Path,
    *,
    capacity: int = 2,
    clock: Clock = SYSTEM_CLOCK,
    backend: Backend | None = None,
    daily_spend_limit: float | None = None,
    app_options: dict[str, Any] | None = None,
    uvicorn_options: dict[str, Any] | None = None,
    store_type: Callable[[Path], SqliteQueue] = SqliteQueue,
    journal_retry_s: float = 5.0,
    warmth: WarmPolicy = COLD,
) -> Iterator[ThreadServer]:
    """The app and the service in this process; uvicorn on a free loopback port (with the
    given create_app and uvicorn.Config options on top)."""
    store = store_type(tmp / "queue.db")
    options = ServiceOptions(
        data_dir=tmp / "data",
        capacity=capacity,
        daily_spend_limit_usd=daily_spend_limit,
        backoff=lambda n: 0.0,
        journal_retry_s=journal_retry_s,
        warmth=warmth,
    )
    service = Service(store, backend or LocalBackend(tmp), options, clock)
    service.start()
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as `clore-run serve` does
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        create_app(service, TOKEN, **(app_options or {})),
        log_level="error",
        lifespan="off",
        **(uvicorn_options or {}),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 10, "uvicorn to start")
        yield ThreadServer(service, Api(f"http://127.0.0.1:{sock.getsockname()[1]}"), server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        service.stop(grace_s=5)
        store.close()
        sock.close()


# The CLI as the lead wires it: runner.cli's app with this module's commands registered.
_ENTRY = (
    "import sys; from runner.cli import app, main; from runner.cli.serve import register; "
    "register(app); main(sys.argv[1:])"
)


@dataclass
class ServeProcess:
    proc: subprocess.Popen[str]
    api: Api
    instance: str = ""  # the token it printed (its lease's, on a shared queue)
    # What it wrote to stderr, kept in an unnamed file: a test that fails shows why a server
    # ended (a pipe nobody reads could fill and stall the server instead).
    errors: IO[str] | None = None

    def stderr_text(self) -> str:
        if self.errors is None or self.errors.closed:
            return ""
        self.errors.seek(0)
        return self.errors.read()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._close()

    def terminate(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=20)
        self._close()
        return code

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def stop_and_show(servers: list[ServeProcess]) -> None:
    """Stop whatever still runs and print what each server said (pytest shows it on a failure)."""
    for server in servers:
        if server.proc.poll() is None:
            server.terminate()
        print(f"--- serve {server.instance} (exit {server.proc.returncode}) said:")
        print(server.stderr_text())


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`clore-run ARGS...` as the lead wires it, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-c", _ENTRY, *args],
        capture_output=True,
        text=True,
        env=marked_env(env),
        timeout=60,
    )


def start_serve(db: Path | str, *extra: str, token: str = TOKEN) -> ServeProcess:
    """`clore-run serve --port 0` in a subprocess; its URL from its first line of output."""
    (server,) = start_serves(1, db, *extra, token=token)
    return server


def start_serves(
    count: int,
    db: Path | str,
    *extra: str,
    token: str = TOKEN,
    entry: str = _ENTRY,
    env: dict[str, str] | None = None,
) -> list[ServeProcess]:
    """`count` servers on one --db, started side by side (each waits for its own import).
    `entry`: the Python that starts the command line (a test may patch something first)."""
    # Kept open past the server, so a failing test can still read it; unnamed, so nothing stays.
    errors = [tempfile.TemporaryFile("w+") for _ in range(count)]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", entry, "serve", "--port", "0", "--db", str(db), *extra],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=marked_env({**(env or {}), "CLORE_RUN_TOKEN": token}),
            preexec_fn=default_signals,
        )
        for err in errors
    ]
    servers = []
    for proc, err in zip(procs, errors, strict=True):
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server prints, or exits
        match = re.search(r"listening on (http://\S+)", line)
        if match is None:
            for other in procs:
                other.kill()
            err.seek(0)
            raise AssertionError(f"serve did not start: {line!r}\n{err.read()}")
        said = re.search(r"instance (\w+)\)", line)
        servers.append(ServeProcess(proc, Api(match.group(1)), said.group(1) if said else "", err))
    return servers
