"""`clore-run serve`: start the queue (store, backend, scheduling loop) and the HTTP API.

The token is mandatory: the API runs shell commands, and loopback is no trust boundary (every
local user and any web page a local browser opens can reach 127.0.0.1). There is deliberately
no flag to turn auth off. The token and the Clore API key are taken out of the process's
environment once read, because local jobs inherit it. That does not erase them from the
environment block the kernel shows as /proc/<pid>/environ, which a local job (the same user)
could read, so the process also makes itself non-dumpable: its /proc files and memory are then
root's alone. (A server run as root has root's jobs, which can read anything anyway.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from runner import redact
from runner.backends.base import Backend, ChecksAccess
from runner.core.warm_policy import COLD, WarmPolicy
from runner.errors import InfrastructureError, UsageError
from runner.file_lock import hold_lock
from runner.process_guard import make_non_dumpable
from runner.serve.backends import BackendChoice, build, pool_seat
from runner.serve.fleet import FleetOptions
from runner.serve.service import Service, ServiceOptions
from runner.stores.queue import open_queue, shared

MIN_TOKEN_CHARS = 16
_MAKE_TOKEN = (
    "export CLORE_RUN_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    db: Path | str  # a SQLite file, or a postgresql:// URL shared by N instances
    backend: BackendChoice
    concurrency: int
    daily_spend_limit_usd: float | None
    data_dir: Path | None = None  # logs and artifacts (default: beside a SQLite --db)
    lease_ttl_s: float = FleetOptions.ttl_s
    warmth: WarmPolicy = COLD  # --keep-warm, --warm, --idle-budget
    # Whose X-Forwarded-For is believed (--trusted-proxy): none by default, so a client cannot
    # pick the address login throttling counts it under.
    trusted_proxies: tuple[str, ...] = ()
    api_docs: bool = False  # /docs and /redoc (their scripts come from a CDN)


def _private(db: Path | str, data_dir: Path) -> None:
    """What an earlier serve (before its umask) left readable by others: made this user's."""
    paths = [data_dir]
    if isinstance(db, Path):
        paths += [db.with_name(db.name + suffix) for suffix in ("", "-wal", "-shm")]
    for path in paths:
        with contextlib.suppress(OSError):  # absent, or not ours to change: left as it is
            if path.is_symlink():
                continue
            if path.is_dir():  # 0700: what is inside is closed to others with it
                path.chmod(0o700)
            elif path.exists():
                path.chmod(0o600)


def data_dir_for(db: Path | str, given: Path | None) -> Path:
    if given is not None:
        return given
    if isinstance(db, Path):
        return db.with_name(db.name + ".d")
    return Path(".clore-run/serve.d")


def read_token() -> str:
    token = os.environ.get("CLORE_RUN_TOKEN", "")
    if not token:
        raise UsageError("CLORE_RUN_TOKEN is not set: the API needs a bearer token", _MAKE_TOKEN)
    if len(token) < MIN_TOKEN_CHARS:
        raise UsageError(
            f"CLORE_RUN_TOKEN is shorter than {MIN_TOKEN_CHARS} characters", _MAKE_TOKEN
        )
    return token


def bind(host: str, port: int) -> socket.socket:
    """Bind before anything starts, so a taken port is a usage error, not a uvicorn exit."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it. Without it uvicorn's h11 writes (headers, then body)
        # meet Nagle and delayed ACKs: every reply took 44 ms on loopback instead of 1 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(2048)  # connections wait in the backlog from here on, not refused
    except OSError as exc:
        raise UsageError(f"--host {host} --port {port}: cannot listen there ({exc})") from None
    return sock


def _say_access(backend: Backend) -> None:
    """A refused key ends the start (exit 3) before anything is queued; a service out of reach
    is said once and the server starts (it may come back)."""
    if isinstance(backend, ChecksAccess) and (warning := backend.check_access()) is not None:
        print(f"clore-run serve: warning: {warning}", file=sys.stderr, flush=True)


def run_server(options: ServeOptions) -> None:
    token = read_token()
    # The database, its WAL (jobs' `env:` values), logs and artifacts: this user's only.
    os.umask(0o077)
    try:
        # uvicorn and the app: only `serve` itself loads them (its other commands don't)
        import uvicorn

        from runner.serve.app import create_app
        from runner.serve.http_limits import uvicorn_limits
    except ImportError as exc:
        raise UsageError(
            f"clore-run serve needs the 'serve' extra ({exc.name} is missing)",
            "in a checkout of clore-run: pip install '.[serve]'",
        ) from None
    sock = bind(options.host, options.port)
    # One server per SQLite file; N on PostgreSQL, where leases say who holds what.
    lock = lock_db(options.db) if isinstance(options.db, Path) else None
    instance = uuid.uuid4().hex[:12]
    store = open_queue(options.db, lease_ttl_s=options.lease_ttl_s)
    _private(options.db, data_dir_for(options.db, options.data_dir))
    backend, reconcile = build(options.backend, instance)
    _say_access(backend)
    seat = pool_seat(backend)
    if seat is not None and (queue := shared(store)) is not None:
        queue.claim_slots_from(seat)  # a job and its pool's server slot, claimed together
    capacity = min(options.concurrency, backend.capacity() or options.concurrency)
    secrets_taken = [os.environ.pop(k, "") for k in ("CLORE_RUN_TOKEN", "CLORE_API_KEY")]
    hide_from_same_user(secrets_taken)
    service = Service(
        store,
        backend,
        ServiceOptions(
            data_dir=data_dir_for(options.db, options.data_dir),
            capacity=capacity,
            daily_spend_limit_usd=options.daily_spend_limit_usd,
            reconcile=reconcile,
            instance=instance,
            fleet=FleetOptions(ttl_s=options.lease_ttl_s),
            on_lease_lost=_end_the_server,
            warmth=options.warmth,
        ),
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    service.start()
    host, port = sock.getsockname()[:2]
    url = f"http://{_url_host(host)}:{port}"
    if service.shared is not None:  # where other instances send a reader of its logs
        service.shared.set_url(instance, url)
    print(
        f"clore-run serve: listening on {url} (db {store.path}, "
        f"backend {backend.name}, concurrency {capacity}, instance {instance})",
        flush=True,
    )
    config = uvicorn.Config(
        create_app(service, token, api_docs=options.api_docs),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told: a client on this host
        # (or behind a local proxy that passes the header on) could rotate it past throttling.
        proxy_headers=bool(options.trusted_proxies),
        forwarded_allow_ips=",".join(options.trusted_proxies) or "",
        **uvicorn_limits(),
    )
    try:
        with _signals_end_the_server():
            uvicorn.Server(config).run(sockets=[sock])  # returns on SIGINT/SIGTERM
    finally:
        service.stop()
        store.close()
        if lock is not None:
            lock.close()
    if service.fleet is not None and service.fleet.lost:
        raise InfrastructureError(
            f"instance {instance} lost its lease on the queue: another server took its jobs",
            hint="start it again (a new instance with a new lease)",
        )


def _end_the_server(why: str) -> None:
    """The lease is lost: another instance owns this one's jobs now. Stop as on SIGTERM (the
    hand-over kills what runs; its fenced writes land only where nobody took the job)."""
    os.kill(os.getpid(), signal.SIGTERM)


def lock_db(db: Path) -> IO[bytes]:
    """One server per queue database: a second one would take the first one's running
    attempts for a dead server's (kill them, run them again). The lock is the process's for
    as long as the returned file is open; the kernel drops it when the process dies."""
    path = db.with_name(db.name + ".lock")
    return hold_lock(
        path,
        lambda exc: UsageError(f"--db {db}: cannot create {path} ({exc})"),
        UsageError(
            f"--db {db}: another clore-run serve is using it", "stop it, or pass another --db"
        ),
    )


def hide_from_same_user(secrets_taken: list[str]) -> None:
    """Linux: make /proc/<pid>/environ, /proc/<pid>/mem and ptrace of this process root-only
    (PR_SET_DUMPABLE 0). The `clore-run` entry point has done it already; a server started
    another way (tests, an embedding) gets it here. The secrets it took out of os.environ
    stay known to the redaction."""
    redact.register(*secrets_taken)
    if sys.platform.startswith("linux") and not make_non_dumpable():
        logging.getLogger("clore_run.serve").warning("could not make the process non-dumpable")


@contextmanager
def _signals_end_the_server() -> Iterator[None]:
    """uvicorn stops on SIGINT/SIGTERM, then raises the signal again for the handler that was
    there before it. With Python's defaults that kills the process (SIGTERM) or raises
    KeyboardInterrupt (SIGINT) before the queue hands its running jobs over; this handler lets
    run() return, so the shutdown is clean and the exit code 0. SIGHUP (a closed terminal),
    which uvicorn does not handle, is turned into SIGTERM: by default it would kill the server
    with its jobs running on and its rentals billing."""
    previous = {s: signal.signal(s, _noted) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, _hung_up)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _noted(signum: int, _frame: FrameType | None) -> None:
    logging.getLogger("clore_run.serve").info("%s: stopped", signal.Signals(signum).name)


def _hung_up(_signum: int, _frame: FrameType | None) -> None:
    signal.raise_signal(signal.SIGTERM)  # uvicorn's handler while it runs, else _noted


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
