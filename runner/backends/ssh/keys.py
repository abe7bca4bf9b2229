"""SSH keys: the client key we log in with, and the host keys we trust within one run.

The client key is either an ed25519 pair generated per run and kept in memory only (its public
line is what Clore's `create_order` receives as `ssh_key`), or an identity file the user gives
(`--backend ssh --identity KEYFILE`). Passwords are never used.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from runner.errors import InfrastructureError, UsageError


@dataclass(frozen=True)
class ClientKey:
    """A private key to authenticate with, and its OpenSSH public line."""

    pkey: paramiko.PKey
    public_line: str

    @classmethod
    def generate(cls, comment: str = "clore-run") -> ClientKey:
        """A fresh ed25519 key pair that never touches the disk."""
        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode("ascii")
        public = private.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        pkey = paramiko.Ed25519Key.from_private_key(io.StringIO(pem))
        return cls(pkey=pkey, public_line=f"{public.decode('ascii')} {comment}")

    @classmethod
    def from_file(cls, path: Path) -> ClientKey:
        """Load an unencrypted identity file (any type paramiko knows). UsageError if unusable."""
        try:
            pkey = paramiko.PKey.from_path(path)
        except FileNotFoundError:
            raise UsageError(f"identity file {path} does not exist") from None
        except (paramiko.PasswordRequiredException, TypeError, ValueError, OSError) as exc:
            # paramiko ≥ 3.2 loads through `cryptography`, which raises TypeError for a key
            # with a passphrase; older versions raise PasswordRequiredException.
            if isinstance(exc, paramiko.PasswordRequiredException) or "password" in str(exc):
                raise UsageError(
                    f"identity file {path} is encrypted",
                    hint="use a key without a passphrase, e.g. a deploy key made for CI",
                ) from None
            raise UsageError(f"identity file {path} is not a usable private key: {exc}") from None
        except paramiko.SSHException as exc:
            raise UsageError(f"identity file {path} is not a usable private key: {exc}") from None
        return cls(pkey=pkey, public_line=f"{pkey.get_name()} {pkey.get_base64()}")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.pkey)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:...` form, the one `ssh-keygen -l` prints."""
    return key.fingerprint


# A known_hosts key type -> the host key algorithms that prove it.
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


class HostRefused(InfrastructureError):
    """The host gave an answer that asking again cannot change: our key is not accepted, or
    its host key is not the one expected. Not retried on that host."""


class HostKeyStore:
    """Trust on first use, for the length of one run; a known_hosts file first, when given.

    Rented servers are fresh, so there is no earlier key to compare with; what we can guarantee
    is that the machine we talk to does not change under us between connections of the same
    run. Servers the user names (`--backend ssh`) may be in their ~/.ssh/known_hosts: a host
    listed there must show a key listed for it (as `ssh` with StrictHostKeyChecking would), and
    only the key types listed are negotiated, so a server cannot dodge the check by offering
    another type. Hosts not listed fall back to trust on first use.
    """

    def __init__(self, known_hosts: Path | None = None) -> None:
        self._keys: dict[tuple[str, int], paramiko.PKey] = {}
        self._lock = threading.Lock()
        self._known_path = known_hosts
        self._known = _load_known_hosts(known_hosts) if known_hosts is not None else None

    def known_algorithms(self, host: str, port: int) -> tuple[str, ...]:
        """Host key algorithms to offer for a host known_hosts lists (else empty: any)."""
        listed = self._known.lookup(_known_name(host, port)) if self._known is not None else None
        if not listed:
            return ()
        return tuple(a for t in listed for a in _ALGORITHMS.get(t, (t,)))

    def verify(self, host: str, port: int, key: paramiko.PKey) -> str:
        """Record the key on first sight; raise if it differs later. Returns its fingerprint."""
        if self.known_algorithms(host, port):
            assert self._known is not None
            if not self._known.check(_known_name(host, port), key):
                raise self.not_listed(host, port, f"shows {fingerprint(key)} ({key.get_name()})")
        with self._lock:
            known = self._keys.setdefault((host, port), key)
        if known != key:
            raise HostRefused(
                f"host key of {host}:{port} changed within this run: "
                f"was {fingerprint(known)} ({known.get_name()}), "
                f"now {fingerprint(key)} ({key.get_name()})",
                hint="someone may be intercepting the connection; the server was not used",
            )
        return fingerprint(key)

    def not_listed(self, host: str, port: int, what: str) -> HostRefused:
        """The error for a server whose host key is not among those known_hosts lists."""
        name = _known_name(host, port)
        return HostRefused(
            f"host key of {host}:{port} is not the one {self._known_path} lists: the server {what}",
            hint="someone may be intercepting the connection; the server was not used. If its "
            f"key really changed, remove the old one: ssh-keygen -R '{name}'",
        )


def _known_name(host: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts."""
    return host if port == 22 else f"[{host}]:{port}"


def _load_known_hosts(path: Path) -> paramiko.HostKeys | None:
    """The file's keys (lines that do not parse are skipped, as `ssh` does); None when there
    is no such file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    keys = paramiko.HostKeys()
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = HostKeyEntry.from_line(line, number)
        except (InvalidHostKey, paramiko.SSHException, ValueError):
            continue
        if entry is not None and entry.key is not None:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    return keys
