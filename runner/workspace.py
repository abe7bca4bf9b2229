"""Which files make up a job's workspace: the git-tracked files of the current repository.

Local and remote backends ship the same set, so a pipeline behaves the same on both. Outside a
git work tree nothing says which files are meant to travel, so a folder with files in it is
shipped only when a job asks for it (`workspace: all`), and never its secrets: a rented server
is a stranger's machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache"})
# Folders that hold credentials by convention: never walked into outside git (nor `.git`, above).
# SSH and GPG keys, cloud CLIs' logins (AWS, Azure), registry logins (.docker/config.json),
# cluster credentials (.kube/config), `pass`'s store, Terraform's tokens.
SECRET_DIRS = frozenset(
    {".ssh", ".gnupg", ".aws", ".azure", ".docker", ".kube", ".password-store", ".terraform.d"}
)
# Credential stores known by their folder and name together (either may be a file or a
# folder): a name alone (`gh`, `credentials`) is too common to withhold everywhere. GitHub's
# and hub's CLI logins, gcloud's, cargo's and RubyGems' registry tokens.
SECRET_PLACES = frozenset(
    {
        (".config", "gh"),
        (".config", "hub"),
        (".config", "gcloud"),
        (".cargo", "credentials"),
        (".cargo", "credentials.toml"),
        (".gem", "credentials"),
    }
)
_HEAD_BYTES = 4096


# Files that hold credentials by convention (matched on the file name, case-insensitive):
# dotenv files, netrc-style password files, PEM/PKCS#12 keys, OpenSSH keys (id_rsa, id_ed25519),
# git's credential store, npm's and Docker's (old) registry logins, Vault's token, s3cmd's and
# boto's keys, kubeconfig files, Java keystores, KeePass databases.
_SECRET_NAME = re.compile(
    r"\.env(\..*)?|[._]netrc|\.pgpass|\.pypirc|.*\.(pem|key|p12|pfx|jks|keystore|kdbx)"
    r"|id_[a-z0-9_]+(\.pub)?|\.git-credentials|\.npmrc|\.dockercfg|\.vault-token|\.s3cfg"
    r"|\.boto|kubeconfig(\..*)?|credentials\.tfrc\.json",
    re.I,
)
# A private key under any name: PEM and OpenSSH keys say so in their first line.
_KEY_HEADER = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


@dataclass(frozen=True)
class Workspace:
    """The files to ship from `root` and how they were chosen."""

    files: tuple[str, ...]  # relative POSIX paths under root
    in_git: bool  # True: git's tracked files; False: a walk of the folder
    withheld: tuple[str, ...] = ()  # secret-looking paths left out of a walk (folders end in /)


def workspace_files(root: Path, exclude_dirs: frozenset[str] = frozenset()) -> Workspace:
    """The files to ship from `root`.

    Inside a git work tree: the tracked files (what CI checked out), as git lists them. Outside
    one: every regular file, skipping VCS, cache and virtualenv folders, `exclude_dirs` and
    anything that looks like a secret (see `is_secret_name`, and any file holding a private key).
    """
    tracked = _git_tracked(root)
    if tracked is not None:
        files = tuple(
            p
            for p in tracked
            if not exclude_dirs.intersection(Path(p).parts) and (root / p).is_file()
        )
        return Workspace(files, in_git=True)
    return _walk(root, _SKIP_DIRS | exclude_dirs)


def is_secret_name(name: str) -> bool:
    """A file name that by convention holds credentials (`.env.local`, `id_ed25519`, `tls.key`)."""
    return _SECRET_NAME.fullmatch(name) is not None


def _walk(root: Path, skip: frozenset[str]) -> Workspace:
    found: list[str] = []
    withheld: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        secret_dirs = {d for d in dirnames if _is_secret_place(here, d) or d in SECRET_DIRS}
        withheld += [(here / d).relative_to(root).as_posix() + "/" for d in secret_dirs]
        dirnames[:] = sorted(d for d in dirnames if d not in skip and d not in secret_dirs)
        for name in sorted(filenames):
            full = here / name
            if not full.is_file() or full.is_symlink():
                continue
            rel = full.relative_to(root).as_posix()
            if is_secret_name(name) or _is_secret_place(here, name) or _holds_private_key(full):
                withheld.append(rel)
            else:
                found.append(rel)
    return Workspace(tuple(found), in_git=False, withheld=tuple(sorted(withheld)))


def _is_secret_place(folder: Path, name: str) -> bool:
    return (folder.name, name) in SECRET_PLACES


def _holds_private_key(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return _KEY_HEADER.search(handle.read(_HEAD_BYTES)) is not None
    except OSError:
        return False  # unreadable: the upload names it, as for any file that cannot be read


def _git_tracked(root: Path) -> list[str] | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return [p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
