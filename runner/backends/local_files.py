"""Files in and out of a local job: the workspace copy and the artifact collection.

Artifacts are matched inside the job's directory only; a glob or a symlink that leads outside
it is refused, so a job cannot make clore-run copy arbitrary files into the reports.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from runner.core.model import Job
from runner.errors import local_fault_from
from runner.untrusted import unsafe_file_name


def copy_workspace(root: Path, files: tuple[str, ...], dest: Path) -> None:
    """Copy `files` (relative to `root`) into `dest`, keeping their layout."""
    made: set[Path] = set()
    for rel in files:
        target = dest / rel
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        try:
            shutil.copy2(root / rel, target, follow_symlinks=True)
        except OSError as exc:  # gone since the list was made, or this disk is full
            raise local_fault_from(exc, "cannot copy workspace file") from None


def collect_artifacts(workdir: Path, job: Job, out: Path) -> list[str]:
    """Copy the job's artifact globs and JUnit file to `out`; return warnings."""
    patterns = [*job.artifacts, *([job.junit] if job.junit else [])]
    warnings: list[str] = []
    base = workdir.resolve()
    for pattern in patterns:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            warnings.append(f"artifact '{pattern}' ignored: it must be a path inside the job")
            continue
        matches = sorted(workdir.glob(pattern))
        if not matches:
            warnings.append(f"artifact '{pattern}' matched no file")
        for match in matches:
            name = match.relative_to(workdir)
            try:
                if unsafe_file_name(str(name)):
                    warnings.append(_refused(name))
                    continue
                if not match.resolve().is_relative_to(base):
                    warnings.append(f"artifact {_shown(name)} leads outside the job")
                    continue
                _copy(match, base, out, name, warnings)
            except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
                # The job's verdict stands; a file that cannot be collected is a warning.
                warnings.append(f"artifact {_shown(name)} not collected: {exc}")
    return warnings


def _copy(source: Path, base: Path, out: Path, name: Path, warnings: list[str]) -> None:
    target = out / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        for item in sorted(source.rglob("*")):
            inside = item.relative_to(source)
            if unsafe_file_name(str(inside)):
                warnings.append(_refused(name / inside))
            elif item.is_file() and item.resolve().is_relative_to(base):
                dest = target / inside
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(item, dest)
    elif source.is_file():
        shutil.copy2(source, target)


def _shown(name: Path) -> str:
    """A name a job chose, quoted with its controls as visible escapes."""
    return repr(str(name))[:200]


def _refused(name: Path) -> str:
    return (
        f"artifact {_shown(name)} refused: its name holds a control character (a newline, "
        "ESC, ...); rename it in the job"
    )
