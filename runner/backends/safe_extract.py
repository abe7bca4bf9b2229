"""Extracting a tar stream from a machine we do not control, without letting it out of a folder.

Artifacts come from rented servers. A hostile (or just broken) one could send members named
`/etc/x` or `../evil`, a symlink to `/` followed by files written through it, or device files.
Every member is checked against what is on disk at that moment, in the spirit of tarfile's
`filter="data"` (which Python 3.10.0-3.10.11 lack): unsafe members are skipped and reported, the
rest is written. Nothing is ever written through a symlink, and links that end up pointing
outside the folder are removed at the end.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafeMember(Exception):
    """Why one member was refused."""


@dataclass
class ExtractReport:
    written: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (member name, reason)


def safe_extract(stream: IO[bytes], dest: Path) -> ExtractReport:
    """Extract the uncompressed tar `stream` under `dest` (created if needed).

    Raises tarfile.TarError when the stream is not a readable tar.
    """
    dest.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(dest))
    report = ExtractReport()
    links: list[tuple[str, Path]] = []
    with tarfile.open(fileobj=stream, mode="r|", bufsize=_CHUNK) as tar:
        for member in tar:
            try:
                target = _extract_member(tar, member, root)
            except UnsafeMember as exc:
                report.rejected.append((member.name, str(exc)))
                continue
            report.written.append(member.name)
            if member.issym():
                links.append((member.name, target))
    _drop_links_leading_out(links, root, report)
    return report


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> Path:
    target = root.joinpath(*_safe_parts(member.name))
    if member.isdir():
        _make_dirs(root, target)
    elif member.isreg():
        _prepare(root, target)
        _write_file(tar, member, target)
    elif member.issym():
        if PurePosixPath(member.linkname).is_absolute():
            raise UnsafeMember("symlink to an absolute path")
        _check_link_target(root, target.parent / member.linkname, "symlink")
        _prepare(root, target)
        os.symlink(member.linkname, target)
    elif member.islnk():
        source = root.joinpath(*_safe_parts(member.linkname))
        _check_hardlink_source(root, source)
        if source == target:  # the same file listed twice: it is already there
            return target
        _prepare(root, target)
        shutil.copyfile(source, target, follow_symlinks=False)  # a copy: no inode shared
    else:
        raise UnsafeMember("device, fifo or other special file")
    return target


def _safe_parts(name: str) -> tuple[str, ...]:
    if not name or "\0" in name:
        raise UnsafeMember("empty or malformed name")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise UnsafeMember("absolute path")
    if ".." in path.parts:
        raise UnsafeMember("path leaves the folder ('..')")
    parts = tuple(p for p in path.parts if p != ".")
    if not parts:
        raise UnsafeMember("names the folder itself")
    return parts


def _make_dirs(root: Path, directory: Path) -> None:
    """Create `directory` one level at a time, refusing to pass through anything not a folder."""
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if not stat.S_ISDIR(mode):
            raise UnsafeMember(f"'{current.relative_to(root)}' is a link or file, not a folder")


def _prepare(root: Path, target: Path) -> None:
    """Make the parent folders; remove a non-folder at `target` (a link itself, not its target)."""
    _make_dirs(root, target.parent)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise UnsafeMember("a folder of that name is in the way")
    os.unlink(target)


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = tar.extractfile(member)
    assert source is not None  # regular members always have a body
    mode = 0o755 if member.mode & 0o111 else 0o644  # never setuid/setgid, never world-writable
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def _check_link_target(root: Path, pointed: Path, kind: str) -> None:
    if not _inside(root, Path(os.path.realpath(pointed))):
        raise UnsafeMember(f"{kind} leads out of the folder")


def _check_hardlink_source(root: Path, source: Path) -> None:
    _check_link_target(root, source, "hard link")
    try:
        mode = os.lstat(source).st_mode
    except FileNotFoundError:
        raise UnsafeMember("hard link to a member not extracted") from None
    if not stat.S_ISREG(mode):
        raise UnsafeMember("hard link to something other than a file")


def _drop_links_leading_out(
    links: list[tuple[str, Path]], root: Path, report: ExtractReport
) -> None:
    """A link checked fine when made can point out later, through a link made after it."""
    for name, link in links:
        if os.path.islink(link) and not _inside(root, Path(os.path.realpath(link))):
            os.unlink(link)
            report.written.remove(name)
            report.rejected.append((name, "symlink leads out of the folder"))


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents
