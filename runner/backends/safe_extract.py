"""Extracting a tar stream from a machine we do not control, without letting it out of a folder.

Artifacts come from rented servers. A hostile (or just broken) one could send members named
`/etc/x` or `../evil`, a symlink to `/` followed by files written through it, or device files.
Every member is checked against what is on disk at that moment, in the spirit of tarfile's
`filter="data"` (which Python 3.10.0-3.10.11 lack): unsafe members are skipped and reported, the
rest is written. Nothing is ever written through a symlink, and links that end up pointing
outside the folder are removed at the end (also when the stream breaks off, and also links an
earlier extraction into the same folder left).

Sizes are bounded too, since a few KiB of tar can ask for anything: what is written (hard links are
copies, so they count) and what is read stop at `max_bytes`; sparse members (whose holes would be
written out as zeros, and whose maps tarfile reads without bound) and extended headers over
MAX_HEADER_BYTES (tarfile reads them whole into memory) end the extraction before tarfile reads
them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, cast

from runner.untrusted import unsafe_file_name

_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
MAX_BYTES = 10 << 30  # one job's artifacts: written, and read from the stream
MAX_FILE_BYTES = 4 << 30  # one member: a bigger one is refused, the rest still written
MAX_MEMBERS = 10_000  # members read per job: 100,000 tiny files took 11 s to write
MAX_REFUSALS_LISTED = 20  # refusals named one by one; the rest are counted
MAX_HEADER_BYTES = 1 << 20  # one pax/long-name header, and all global pax headers together
_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class UnsafeMember(Exception):
    """Why one member was refused."""


@dataclass
class ExtractReport:
    written: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (member name, reason)
    more_refused: int = 0  # refusals past the first MAX_REFUSALS_LISTED, counted only

    def refuse(self, name: str, why: str) -> None:
        if len(self.rejected) < MAX_REFUSALS_LISTED:
            self.rejected.append((name, why))
        else:
            self.more_refused += 1


class OverLimit(UnsafeMember):
    """Writing this member would pass `max_bytes`: it and the rest are left out."""


def safe_extract(
    stream: IO[bytes],
    dest: Path,
    max_bytes: int = MAX_BYTES,
    max_members: int = MAX_MEMBERS,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> ExtractReport:
    """Extract the uncompressed tar `stream` under `dest` (created if needed): at most
    `max_members` members, `max_bytes` in all, `max_file_bytes` per file.

    Raises tarfile.TarError when the stream is not a readable tar, or becomes unreadable (what
    was extracted until then stays, checked).
    """
    dest.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(dest))
    report = ExtractReport()
    capped = _SizeCapped(stream, max_bytes + 2 * _CHUNK)  # tarfile reads ahead up to a chunk
    written = members = 0
    try:
        with tarfile.open(
            fileobj=cast(IO[bytes], capped), mode="r|", bufsize=_CHUNK, tarinfo=_CheckedInfo
        ) as tar:
            while (member := tar.next()) is not None:
                # stream mode would keep every header in memory
                tar.members.clear()  # type: ignore[attr-defined]
                members += 1
                if members > max_members:
                    report.refuse(member.name, _too_many(max_members))
                    break
                try:
                    if member.offset_data > max_bytes:
                        raise OverLimit()
                    if member.isreg() and member.size > max_file_bytes:
                        raise UnsafeMember(
                            f"{member.size} bytes, over the limit of {max_file_bytes} for one file"
                        )
                    written += _extract_member(tar, member, root, max_bytes - written)
                except OverLimit:
                    report.refuse(member.name, _over(max_bytes))
                    break
                except UnsafeMember as exc:
                    report.refuse(member.name, str(exc))
                    continue
                report.written.append(member.name)
    except RecursionError:  # a chain of thousands of extended headers: tarfile recurses
        raise tarfile.ReadError("extended headers nested too deeply") from None
    finally:
        _drop_links_leading_out(root, report)
    return report


def _too_many(max_members: int) -> str:
    return f"over the limit of {max_members} members for a job's artifacts; the rest was left out"


def _over(max_bytes: int) -> str:
    return f"over the limit of {max_bytes} bytes for a job's artifacts; the rest was left out"


class _SizeCapped:
    """The stream, read up to `limit` bytes: past that, a tar error."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._left = limit

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._left -= len(data)
        if self._left < 0:
            raise tarfile.ReadError("the artifact stream is over its size limit")
        return data


class _CheckedInfo(tarfile.TarInfo):
    """Refuses what tarfile would otherwise read without bound, before it reads it.

    Overrides tarfile's own (private, long-stable) processing steps; the tests of this module
    fail should they ever change.
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED:
            size = self.size
            if self.type == tarfile.XGLTYPE:  # global headers pile up for the whole archive
                size += getattr(tarfile_, "_clore_global_bytes", 0)
                tarfile_._clore_global_bytes = size  # type: ignore[attr-defined]
            if size > MAX_HEADER_BYTES:
                raise tarfile.ReadError(
                    f"extended tar headers over {MAX_HEADER_BYTES} bytes refused"
                )
        processed: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return processed

    def _proc_sparse(self, *_: object) -> tarfile.TarInfo:
        raise _sparse()

    def _proc_gnusparse_00(self, *_: object) -> None:
        raise _sparse()

    def _proc_gnusparse_01(self, *_: object) -> None:
        raise _sparse()

    def _proc_gnusparse_10(self, *_: object) -> None:
        raise _sparse()


def _sparse() -> tarfile.ReadError:
    return tarfile.ReadError("sparse files are refused (their holes would be written out)")


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path, room: int) -> int:
    """Write one member; returns the bytes it put on disk."""
    if member.issparse():  # _CheckedInfo refuses them earlier; kept should that ever change
        raise _sparse()
    target = root.joinpath(*_safe_parts(member.name))
    if member.isdir():
        _make_dirs(root, target)
    elif member.isreg():
        if member.size > room:
            raise OverLimit()
        _prepare(root, target)
        _write_file(tar, member, target)
        return member.size
    elif member.issym():
        if PurePosixPath(member.linkname).is_absolute():
            raise UnsafeMember("symlink to an absolute path")
        _check_link_target(root, target.parent / member.linkname, "symlink")
        _prepare(root, target)
        os.symlink(member.linkname, target)
    elif member.islnk():
        source = root.joinpath(*_safe_parts(member.linkname))
        size = _check_hardlink_source(root, source)
        if source == target:  # the same file listed twice: it is already there
            return 0
        if size > room:
            raise OverLimit()
        _prepare(root, target)
        shutil.copyfile(source, target, follow_symlinks=False)  # a copy: no inode shared
        return size
    else:
        raise UnsafeMember("device, fifo or other special file")
    return 0


def _safe_parts(name: str) -> tuple[str, ...]:
    if not name or "\0" in name:
        raise UnsafeMember("empty or malformed name")
    if unsafe_file_name(name):
        raise UnsafeMember("name holds a control character (a newline, ESC, ...)")
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


def _check_hardlink_source(root: Path, source: Path) -> int:
    """The source's size, once it is known to be a regular file inside."""
    _check_link_target(root, source, "hard link")
    try:
        info = os.lstat(source)
    except FileNotFoundError:
        raise UnsafeMember("hard link to a member not extracted") from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeMember("hard link to something other than a file")
    return info.st_size


def _drop_links_leading_out(root: Path, report: ExtractReport) -> None:
    """A link checked fine when made can point out later, through a link made after it (in this
    extraction or a later one into the same folder): every link under `root` is checked again,
    until a pass removes none (removing one can change where another leads)."""
    removed = True
    while removed:
        removed = False
        for folder, dirs, files in os.walk(root):
            for entry in (*dirs, *files):
                link = Path(folder, entry)
                if os.path.islink(link) and not _inside(root, Path(os.path.realpath(link))):
                    os.unlink(link)
                    removed = True
                    name = link.relative_to(root).as_posix()
                    report.written = [w for w in report.written if _normal(w) != name]
                    report.refuse(name, "symlink leads out of the folder")


def _normal(name: str) -> str:
    return "/".join(p for p in PurePosixPath(name).parts if p != ".")


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents
