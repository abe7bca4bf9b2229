"""Which files make up a job's workspace: the git-tracked files of the current repository.

Local and remote backends ship the same set, so a pipeline behaves the same on both.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache"})


def workspace_files(root: Path, exclude_dirs: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Relative paths of the files to ship from `root`.

    Inside a git work tree: the tracked files (what CI checked out), as git lists them. Outside
    one: every regular file, skipping VCS, cache and virtualenv folders and `exclude_dirs`.
    """
    tracked = _git_tracked(root)
    if tracked is not None:
        return tuple(
            p
            for p in tracked
            if not exclude_dirs.intersection(Path(p).parts) and (root / p).is_file()
        )
    skip = _SKIP_DIRS | exclude_dirs
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                found.append(full.relative_to(root).as_posix())
    return tuple(found)


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
