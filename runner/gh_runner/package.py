"""The runner package, fetched once on the machine running the action and cached there, so a
rented server needs no download tool: the tarball reaches it over the SSH connection.

Images such as `nvidia/cuda:*-base` have neither `curl` nor `wget`. The machine that runs
`runner start` (a GitHub-hosted runner, a laptop) downloads the pinned release once, checks its
SHA-256 and keeps it under the cache folder named by that checksum; every server of every later
start gets the same file. A package without a checksum is downloaded for this start only and
never cached (nothing says the next download is the same file).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import requests

from runner.errors import InfrastructureError
from runner.gh_runner.remote import RunnerPackage

MAX_PACKAGE_BYTES = 1024 * 1024 * 1024  # the release is ~200 MB; a reply past 1 GiB is not it
_TIMEOUT_S = 60.0  # per read, not for the whole download


def cache_folder(env: Mapping[str, str]) -> Path:
    """`$CLORE_RUN_CACHE`, else `$XDG_CACHE_HOME/clore-run`, else `~/.cache/clore-run`."""
    if env.get("CLORE_RUN_CACHE"):
        return Path(env["CLORE_RUN_CACHE"])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clore-run"


def fetch_package(
    package: RunnerPackage, folder: Path, session: requests.Session | None = None
) -> RunnerPackage:
    """`package` with `local` set to a checked copy on this machine (from the cache when it
    is there). Raises InfrastructureError (nothing is rented yet when start calls it)."""
    if package.local is not None:
        return package
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if package.sha256:
        cached = folder / f"runner-{package.sha256}.tar.gz"
        if cached.is_file() and _sha256(cached) == package.sha256:
            return replace(package, local=cached)
    else:
        cached = folder / f"runner-unchecked-{os.getpid()}.tar.gz"
    got = _download(package.url, folder, session or requests.Session())
    digest = _sha256(got)
    if package.sha256 and digest != package.sha256:
        got.unlink(missing_ok=True)
        raise InfrastructureError(
            f"the runner package from {package.url} has SHA-256 {digest}, not {package.sha256}",
            "check --runner-url and --runner-sha256",
        )
    got.replace(cached)
    return replace(package, local=cached)


def _download(url: str, folder: Path, session: requests.Session) -> Path:
    fd, name = tempfile.mkstemp(prefix=".download-", dir=folder)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out, session.get(url, stream=True, timeout=_TIMEOUT_S) as resp:
            if resp.status_code != 200:
                raise InfrastructureError(
                    f"downloading the runner package {url}: HTTP {resp.status_code}"
                )
            for chunk in resp.iter_content(1024 * 1024):
                size += len(chunk)
                if size > MAX_PACKAGE_BYTES:
                    raise InfrastructureError(f"the runner package {url} is over 1 GiB")
                out.write(chunk)
    except requests.RequestException as exc:
        Path(name).unlink(missing_ok=True)
        raise InfrastructureError(
            f"downloading the runner package {url} failed ({type(exc).__name__})"
        ) from None
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()
