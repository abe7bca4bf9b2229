"""Install and start the runner on a rented server, over the SSH connection the rental opened.

The files go over as the stdin of `cat`, never inside a command line: `install.sh` (shipped
with this package), `params` (package URL, checksum, the seconds left to the cap, the user),
`.jitconfig` (mode 0600 from the `umask`) and the runner package itself when this machine has
it (package.py fetched and cached it: the image then needs no `curl` or `wget`). The command
lines themselves carry only the runner's folder, which we name. Then `bash install.sh DIR`
checks the package (downloading it only when none was sent), starts `run.sh` detached under
`timeout` and returns; see install.sh for why the config reaches the runner through its
environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import BinaryIO

from runner.backends.ssh.connection import SshConnection
from runner.errors import InfrastructureError
from runner.gh_runner.github import JitConfig
from runner.untrusted import console_line

# Pinned: a release we read the checksum of. GitHub updates a JIT runner that is too old for
# it on its first connection, so an old pin costs a minute, not a failure; override both to
# use another (or a mirror).
RUNNER_VERSION = "2.329.0"
RUNNER_URL = (
    f"https://github.com/actions/runner/releases/download/v{RUNNER_VERSION}/"
    f"actions-runner-linux-x64-{RUNNER_VERSION}.tar.gz"
)
RUNNER_SHA256 = "194f1e1e4bd02f80b7e9633fc546084d8d4e19f3928a324d512ea53430102e1d"
INSTALL_TIMEOUT_S = 600.0  # download (~200 MB), unpack, the runner's own dependencies
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_SAFE_VALUE = re.compile(r"^[^\n\r]*$")


@dataclass(frozen=True)
class RunnerPackage:
    url: str = RUNNER_URL
    sha256: str = RUNNER_SHA256  # empty: not checked (said in the log)
    user: str = "auto"  # auto: a non-root `runner` (with sudo) when the image has useradd + sudo
    # The package on this machine (checked), sent over SSH; None: the server downloads `url`.
    local: Path | None = None


def install_script() -> bytes:
    return resources.files("runner.gh_runner").joinpath("install.sh").read_bytes()


def folder_for(label: str) -> str:
    """The runner's folder on the server, as a shell word (only `$HOME` is expanded)."""
    if not _SAFE_NAME.match(label):
        raise ValueError(f"not a safe runner label: {label!r}")
    return f'"$HOME"/clore-runner/{label}'


def install_runner(
    conn: SshConnection,
    label: str,
    config: JitConfig,
    package: RunnerPackage,
    limit_s: float,
) -> str:
    """Put the runner on the server and start it; returns the installer's last line. Raises
    InfrastructureError with the installer's own words when it fails."""
    folder = folder_for(label)
    params = {
        "url": package.url,
        "sha256": package.sha256,
        "limit_s": str(max(0, int(limit_s))),
        "user": package.user,
    }
    for key, value in params.items():
        if not _SAFE_VALUE.match(value):
            raise InfrastructureError(f"runner {key} must be one line: {value!r}")
    lines = "".join(f"{k}={v}\n" for k, v in params.items()).encode()
    _put(
        conn,
        f"mkdir -p {folder} && chmod 700 {folder} && cat > {folder}/install.sh",
        install_script(),
    )
    _put(conn, f"cat > {folder}/params", lines)
    if package.local is not None:
        with package.local.open("rb") as tarball:
            _put(conn, f"cat > {folder}/runner.tar.gz", tarball, INSTALL_TIMEOUT_S)
    _put(conn, f"umask 077 && cat > {folder}/.jitconfig", config.reveal().encode() + b"\n")
    result = conn.run(f"bash {folder}/install.sh {folder}", timeout_s=INSTALL_TIMEOUT_S)
    said = _last_lines(result.stderr or result.stdout)
    if result.exit_code != 0:
        conn.run(f"rm -f {folder}/.jitconfig", timeout_s=30.0)  # never left behind
        raise InfrastructureError(
            f"installing the runner on {conn.endpoint} failed (exit {result.exit_code}): {said}"
        )
    return _last_lines(result.stdout)


def _put(
    conn: SshConnection, command: str, data: bytes | BinaryIO, timeout_s: float = 60.0
) -> None:
    result = conn.run(command, stdin=data, timeout_s=timeout_s)
    if result.exit_code != 0:
        raise InfrastructureError(
            f"writing the runner's files on {conn.endpoint} failed (exit {result.exit_code}): "
            f"{_last_lines(result.stderr)}"
        )


def _last_lines(data: bytes, count: int = 3) -> str:
    """The tail of what the server said, made safe to print (it is untrusted)."""
    text = data.decode("utf-8", "replace")
    lines = [console_line(line).strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-count:]) or "(nothing)"
