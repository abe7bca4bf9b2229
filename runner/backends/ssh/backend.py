"""The `ssh` backend: run jobs on machines the user already has (`--backend ssh --host ...`).

Each host runs one job at a time, so the backend's capacity is the number of hosts. One
connection per host is opened on first use and kept for the run; a host whose connection died is
reconnected for its next job. The work on the server itself is `ssh_exec`'s, shared with the
Clore backend.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import (
    NO_STAGES,
    Backend,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    StageSink,
)
from runner.backends.fixed import FixedServers
from runner.backends.ssh.connection import ConnectOptions, Endpoint, SshConnection, connect
from runner.backends.ssh.exec import ExecOptions, run_job
from runner.backends.ssh.facts import gpu_facts
from runner.backends.ssh.handover import hand_over
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import FailureKind, Job
from runner.errors import InfrastructureError, RunMustStop, UsageError

_HOST = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_.][A-Za-z0-9_.-]*)@)?"
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_DEFAULT_IDENTITIES = ("id_ed25519", "id_ecdsa", "id_rsa")
_SHUTDOWN_WAIT_S = 5.0  # GitHub sends SIGKILL 10 s after SIGTERM; leave room for the rest

log = logging.getLogger("clore_run")


def parse_host(text: str) -> Endpoint:
    """`[USER@]HOST[:PORT]` (IPv6 as `[addr]`) → Endpoint; user defaults to root, port to 22."""
    match = _HOST.fullmatch(text.strip())
    port = int(match["port"]) if match and match["port"] else 22
    if match is None or not 0 < port < 65536:
        raise UsageError(
            f"--host {text!r} is not USER@HOST[:PORT]",
            hint="for example root@203.0.113.7:2222 or root@[2001:db8::1]:22",
        )
    return Endpoint(host=match["v6"] or match["host"], port=port, user=match["user"] or "root")


def default_identity(home: Path | None = None) -> Path:
    """The first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa that exists, as `ssh` would try."""
    ssh_dir = (home or Path.home()) / ".ssh"
    for name in _DEFAULT_IDENTITIES:
        if (ssh_dir / name).is_file():
            return ssh_dir / name
    raise UsageError("--backend ssh needs a key", hint="pass --identity KEYFILE")


class _EitherSet:
    """Quacks like a threading.Event for `is_set`: set when either event is."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self._events = (first, second)

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


class SshBackend(FixedServers):
    """Backend over a fixed list of SSH hosts: each host is a server the run holds from the
    start, the core chooses which host runs which job."""

    name = "ssh"

    def __init__(
        self,
        hosts: Sequence[Endpoint],
        key: ClientKey,
        connect_options: ConnectOptions = ConnectOptions(),  # noqa: B008 - frozen
        exec_options: ExecOptions = ExecOptions(),  # noqa: B008 - frozen
        probe_gpu: bool = True,
        known_hosts: Path | None = None,
    ) -> None:
        names = [str(h) for h in hosts]
        if not hosts:
            raise UsageError("--backend ssh needs at least one --host USER@HOST[:PORT]")
        if len(set(names)) != len(names):
            raise UsageError(f"a host is listed twice: {names}")
        self._key = key
        self._connect_options = connect_options
        self._exec_options = exec_options
        self._probe_gpu = probe_gpu
        self._host_keys = HostKeyStore(known_hosts)
        self._hosts = {str(h): h for h in hosts}
        self._conns: dict[str, SshConnection] = {}
        self._out: set[str] = set()  # hosts that refused us or never answered: not retried
        self._facts: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._running = 0
        self._idle = threading.Condition(self._lock)
        # A queue's: between two jobs on a host, the first's leftovers are checked for
        # (runner/backends/ssh/handover.py); a host that fails is left out.
        self.handover_mark: str | None = None
        self._job_on: dict[str, str] = {}  # host -> the job placed on it last

    @classmethod
    def from_flags(cls, hosts: Sequence[str], identity: Path | None) -> SshBackend:
        """From `--host` values (and the pipeline's `hosts:`) and `--identity`; host keys are
        checked against ~/.ssh/known_hosts for the hosts it lists."""
        key = ClientKey.from_file(identity if identity is not None else default_identity())
        known_hosts = Path.home() / ".ssh" / "known_hosts"
        return cls([parse_host(h) for h in hosts], key, known_hosts=known_hosts)

    def capacity(self) -> int:
        return len(self._hosts)

    def _connected(self, endpoint: Endpoint, cancel: threading.Event, stages: StageSink) -> Place:
        stages.stage("connecting", str(endpoint))
        try:
            self._ensure_connection(endpoint, cancel)
        except InfrastructureError as exc:
            if cancel.is_set() or self._closing.is_set():
                raise
            # Refused (key, host key), or no answer after connect's own retries: asking the
            # same host again only makes the user wait, so it is not offered again.
            raise self._left_out(endpoint, exc) from None
        return Place(name=str(endpoint), facts=dict(self._facts[str(endpoint)]))

    # -- the hosts are the run's fixed servers ------------------------------------------------

    def fixed_servers(self, cap: int) -> Sequence[str]:
        """Every host, in the order given: the core runs at most `cap` jobs on them."""
        return list(self._hosts)

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        """The host the core chose, connected (on first use, or again after its connection
        died). A host that refused us or never answered is left out: `lost` says so."""
        endpoint = self._hosts[self.server_name(server)]
        with self._lock:
            self._job_on[str(endpoint)] = job.id
        return self._connected(endpoint, cancel, stages)

    def attempt_done(self, place: Place) -> None:
        self._drop_dead_connection(place.name)
        with self._lock:
            conn = self._conns.get(place.name)
            job_id = self._job_on.pop(place.name, None)
        if self.handover_mark is None or conn is None or job_id is None:
            return
        left = hand_over(conn, job_id, self.handover_mark)
        if left:  # never reused: the core gives a lost server back
            log.warning("%s failed the clean handover after %s: %s", place.name, job_id, left)
            with self._lock:
                self._out.add(place.name)

    def lost(self, server: int) -> bool:
        with self._lock:
            return self.server_name(server) in self._out

    def _left_out(self, endpoint: Endpoint, exc: InfrastructureError) -> InfrastructureError:
        """Take `endpoint` out of the run; the error for this attempt: the run must stop when
        no host is left, else the job tries another host."""
        with self._lock:
            self._out.add(str(endpoint))
            left = len(self._hosts) - len(self._out)
        why = exc.message.rstrip(".")
        if left == 0:
            last = "no other SSH host to try" if len(self._hosts) == 1 else "no SSH host is left"
            return RunMustStop(f"{why}; {last}", exc.hint)
        return InfrastructureError(
            f"{why}; {endpoint} is left out for the rest of the run "
            f"({left} host{'s' if left != 1 else ''} left)",
            exc.hint,
        )

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        with self._lock:
            conn = self._conns.get(place.name)
            self._running += 1
        try:
            if conn is None or not conn.alive:
                why = conn.lost_reason() if conn else f"{place.name}: not connected"
                return RunOutcome(None, FailureKind.SERVER_LOST, why, dict(place.facts))
            stop = _EitherSet(cancel, self._closing)
            outcome = run_job(conn, request, sink, stop, self._exec_options, stages)
        finally:
            with self._lock:
                self._running -= 1
                self._idle.notify_all()
        facts = {**place.facts, **outcome.facts}
        return RunOutcome(outcome.exit_code, outcome.failure, outcome.message, facts)

    def _drop_dead_connection(self, name: str) -> None:
        """A connection that died is closed here: the host's next job connects afresh."""
        with self._lock:
            conn = self._conns.get(name)
            if conn is not None and not conn.alive:
                del self._conns[name]
                conn.close()

    def shutdown(self) -> None:
        """Kill running jobs' process groups (briefly waited for), then close every connection."""
        self._closing.set()
        deadline = self._exec_options.clock.now() + _SHUTDOWN_WAIT_S
        with self._lock:
            while self._running and self._exec_options.clock.now() < deadline:
                self._idle.wait(max(0.0, deadline - self._exec_options.clock.now()))
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close()

    def _ensure_connection(self, endpoint: Endpoint, cancel: threading.Event) -> None:
        """Connect on first use, or again after the old connection died. One job per host at a
        time means no one else touches this host's entry meanwhile."""
        name = str(endpoint)
        with self._lock:
            conn = self._conns.get(name)
        if conn is not None and conn.alive:
            return
        if conn is not None:
            conn.close()
        conn = connect(endpoint, self._key, self._host_keys, self._connect_options, cancel)
        facts = {"host": name, "host_key": conn.host_key_fingerprint}
        if self._probe_gpu:
            # GPU facts are a nicety; the job itself will show whether the host works.
            with contextlib.suppress(InfrastructureError):
                facts.update(gpu_facts(conn))
        with self._lock:
            self._conns[name] = conn
            self._facts[name] = facts


if TYPE_CHECKING:  # let mypy hold SshBackend to the Backend Protocol

    def _is_a_backend(backend: SshBackend) -> Backend:
        return backend
