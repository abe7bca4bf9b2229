"""One authenticated SSH connection to a server, kept open for the whole run.

How we connect follows what was measured on loopback (OpenSSH 9.2, paramiko): our own socket with
TCP_NODELAY (48 ms → 5 ms per command), aes128-gcm first (fast under `cryptography`), and the
channel window left at paramiko's default (enlarging it was slower). A server that is up but whose
sshd does not answer yet (a rented server that just booted) gets bounded retries with backoff.
Liveness is checked like OpenSSH's ServerAliveInterval/CountMax, so a dead server or a cut network
ends every blocked read and write on the connection within seconds instead of hanging.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import BinaryIO

import paramiko

from runner.backends.ssh.channel import Capped, pump
from runner.backends.ssh.keys import ClientKey, HostKeyStore, HostRefused
from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError

RUN_OUTPUT_LIMIT = 1 << 20  # what `run` keeps of each stream (stdout's head, stderr's tail)
# Preferred first; the rest of paramiko's defaults stay as fallbacks for odd servers.
_FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr")


@dataclass(frozen=True)
class Endpoint:
    """Where to log in: user, host and port."""

    host: str
    port: int = 22
    user: str = "root"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"


@dataclass(frozen=True)
class ConnectOptions:
    """Timeouts and retries. Defaults suit a server named by the user; Clore waits longer."""

    timeout_s: float = 10.0  # TCP connect, banner, key exchange and auth, each
    tries: int = 4  # attempts for a server whose sshd does not answer (yet)
    backoff_s: float = 0.5  # first pause between attempts, doubled each time
    max_backoff_s: float = 8.0
    keepalive_s: float = 2.0  # probe the server this often...
    keepalive_count: int = 3  # ...and give up on it after this many probe intervals unanswered
    clock: Clock = SYSTEM_CLOCK  # what the deadlines and the pauses between tries read


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class ConnectionLost(InfrastructureError):
    """The server stopped answering, or the connection dropped."""


class SshConnection:
    """An authenticated transport plus its liveness monitor. Thread-safe for channels."""

    def __init__(
        self,
        endpoint: Endpoint,
        transport: paramiko.Transport,
        host_key_fingerprint: str,
        options: ConnectOptions,
    ) -> None:
        self.endpoint = endpoint
        self.transport = transport
        self.host_key_fingerprint = host_key_fingerprint
        self._clock = options.clock
        self._monitor = _Liveness(transport, options.keepalive_s, options.keepalive_count)
        self._monitor.start()

    @property
    def alive(self) -> bool:
        return self.transport.is_active()

    def lost_reason(self) -> str:
        """Why the connection is gone, in words for a report."""
        if self._monitor.gave_up:
            return f"{self.endpoint}: server stopped answering ({self._monitor.describe()})"
        exc = self.transport.get_exception()
        detail = f": {exc}" if exc else ""
        return f"{self.endpoint}: connection lost{detail}"

    def exec(self, command: str) -> paramiko.Channel:
        """Start `command` (run by the login shell) on a new channel."""
        try:
            chan = self.transport.open_session(timeout=self._monitor.dead_after_s)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if not self.alive:
                raise ConnectionLost(self.lost_reason()) from exc
            raise InfrastructureError(f"{self.endpoint}: cannot start a command: {exc}") from exc
        return chan

    def run(
        self, command: str, stdin: bytes | BinaryIO = b"", timeout_s: float = 60.0
    ) -> CommandResult:
        """Run a short command to completion and capture its output.

        For small bookkeeping commands; jobs go through `ssh_exec`, which streams. Of each output
        stream at most RUN_OUTPUT_LIMIT bytes are kept: a server could send any amount.
        """
        chan = self.exec(command)
        out = Capped(RUN_OUTPUT_LIMIT)
        err = Capped(RUN_OUTPUT_LIMIT, tail=True)
        try:
            _send_all(self, chan, stdin)
            deadline = self._clock.now() + timeout_s
            finished = pump(chan, out.add, err.add, lambda: self._clock.now() > deadline)
            if not finished:
                raise InfrastructureError(f"{self.endpoint}: {command!r} took over {timeout_s} s")
            code = exit_status(chan, wait_s=self._monitor.dead_after_s)
        finally:
            chan.close()
        if code is None:
            if not self.alive:
                raise ConnectionLost(self.lost_reason())
            code = -1  # killed by a signal: sshd sends no exit status then
        return CommandResult(code, out.value(), err.value())

    def close(self) -> None:
        self._monitor.stop()
        self.transport.close()


def exit_status(chan: paramiko.Channel, wait_s: float) -> int | None:
    """The remote exit code, or None when none came (connection lost, or killed by a signal).

    OpenSSH may send the status just after EOF, hence the short wait. paramiko also sets the
    status event when the channel closes without one, leaving exit_status at -1.
    """
    chan.status_event.wait(wait_s)
    return chan.exit_status if chan.exit_status >= 0 else None


def _send_all(conn: SshConnection, chan: paramiko.Channel, data: bytes | BinaryIO) -> None:
    """Send `data` as the command's stdin: bytes, or a file streamed in chunks (a runner
    package of ~200 MB is not read into memory)."""
    try:
        if isinstance(data, bytes):
            if data:
                chan.sendall(data)
        else:
            for chunk in iter(lambda: data.read(256 * 1024), b""):
                chan.sendall(chunk)
        chan.shutdown_write()
    except OSError as exc:  # the command exited early, or the connection died
        if not conn.alive:
            raise ConnectionLost(conn.lost_reason()) from exc


def connect(
    endpoint: Endpoint,
    key: ClientKey,
    host_keys: HostKeyStore,
    options: ConnectOptions = ConnectOptions(),  # frozen, so sharing it is safe
    cancel: threading.Event | None = None,
) -> SshConnection:
    """Connect and log in, retrying (with backoff) only what a booting server explains.

    Refused connections, timeouts and a missing SSH banner are retried; a rejected key or a
    changed host key is not, since trying again cannot change the answer.
    """
    delay = options.backoff_s
    tries = max(1, options.tries)
    began = options.clock.now()
    for attempt in range(1, tries + 1):
        try:
            return _connect_once(endpoint, key, host_keys, options)
        except InfrastructureError:
            raise
        except (OSError, paramiko.SSHException, EOFError) as exc:
            last = exc
        if attempt == tries:
            break
        if cancel is not None and cancel.wait(delay):
            raise InfrastructureError(f"{endpoint}: connecting was cancelled")
        if cancel is None:
            options.clock.sleep(delay)
        delay = min(delay * 2, options.max_backoff_s)
    raise InfrastructureError(
        f"{endpoint}: no SSH connection after {tries} {'try' if tries == 1 else 'tries'} in "
        f"{options.clock.now() - began:.1f} s: {_describe(last)}",
        hint="check the host and port, and that sshd runs there",
    )


def _connect_once(
    endpoint: Endpoint, key: ClientKey, host_keys: HostKeyStore, options: ConnectOptions
) -> SshConnection:
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=options.timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = transport.handshake_timeout = options.timeout_s
        transport.auth_timeout = options.timeout_s
        _prefer_fast_ciphers(transport)
        known = host_keys.known_algorithms(endpoint.host, endpoint.port)
        if known:  # only what known_hosts can vouch for
            security = transport.get_security_options()
            security.key_types = [t for t in security.key_types if t in known]
        try:
            transport.start_client(timeout=options.timeout_s)
        except paramiko.ssh_exception.IncompatiblePeer:
            if not known:
                raise
            raise host_keys.not_listed(
                endpoint.host, endpoint.port, f"offers none of the key types {known}"
            ) from None
        fingerprint = host_keys.verify(
            endpoint.host, endpoint.port, transport.get_remote_server_key()
        )
        _authenticate(transport, endpoint, key)
    except BaseException:
        transport.close()
        raise
    return SshConnection(endpoint, transport, fingerprint, options)


def _prefer_fast_ciphers(transport: paramiko.Transport) -> None:
    security = transport.get_security_options()
    offered = tuple(security.ciphers)
    fast = tuple(c for c in _FAST_CIPHERS if c in offered)
    security.ciphers = fast + tuple(c for c in offered if c not in fast)


def _authenticate(transport: paramiko.Transport, endpoint: Endpoint, key: ClientKey) -> None:
    try:
        transport.auth_publickey(endpoint.user, key.pkey)
    except paramiko.AuthenticationException as exc:
        raise HostRefused(
            f"{endpoint}: SSH authentication failed with key {key.fingerprint} "
            f"({key.pkey.get_name()}): {exc}",
            hint=f"add the public key to ~{endpoint.user}/.ssh/authorized_keys on the server, "
            "or pass the right --identity",
        ) from None
    if not transport.is_authenticated():
        raise InfrastructureError(f"{endpoint}: SSH authentication did not complete")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


class _Liveness(threading.Thread):
    """OpenSSH-style keepalive: a probe that needs an answer, every `interval_s`.

    Any answer (OpenSSH answers `keepalive@openssh.com` with a failure) proves the server alive.
    When none comes within interval × count, the transport is closed, which wakes every reader
    and writer blocked on it. TCP alone would not notice a silent peer for minutes.
    """

    def __init__(self, transport: paramiko.Transport, interval_s: float, count: int) -> None:
        super().__init__(name="ssh-keepalive", daemon=True)
        self._transport = transport
        self._interval_s = interval_s
        self.dead_after_s = interval_s * count
        self._stopped = threading.Event()
        self.gave_up = False

    def describe(self) -> str:
        return f"no answer to keepalive for {self.dead_after_s:g} s"

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(self._interval_s) and self._transport.is_active():
            timer = threading.Timer(self.dead_after_s, self._give_up)
            timer.daemon = True
            timer.start()
            try:
                self._transport.global_request("keepalive@openssh.com", wait=True)
            finally:
                timer.cancel()

    def _give_up(self) -> None:
        if not self._stopped.is_set():
            self.gave_up = True
            self._transport.close()
