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


class HostKeyStore:
    """Trust on first use, for the length of one run.

    The servers are fresh (rented minutes ago, or named on the command line), so there is no
    earlier key to compare with; what we can guarantee is that the machine we talk to does not
    change under us between connections of the same run.
    """

    def __init__(self) -> None:
        self._keys: dict[tuple[str, int], paramiko.PKey] = {}
        self._lock = threading.Lock()

    def verify(self, host: str, port: int, key: paramiko.PKey) -> str:
        """Record the key on first sight; raise if it differs later. Returns its fingerprint."""
        with self._lock:
            known = self._keys.setdefault((host, port), key)
        if known != key:
            raise InfrastructureError(
                f"host key of {host}:{port} changed within this run: "
                f"was {fingerprint(known)} ({known.get_name()}), "
                f"now {fingerprint(key)} ({key.get_name()})",
                hint="someone may be intercepting the connection; the server was not used",
            )
        return fingerprint(key)
