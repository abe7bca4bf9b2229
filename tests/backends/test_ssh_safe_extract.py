"""Artifacts from a hostile server cannot write outside their folder."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runner.backends.safe_extract import safe_extract


def _tar(*members: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A tar of (kind, name, content-or-link-target) members, kinds: file dir sym hard chr fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                data = payload if isinstance(payload, bytes) else payload.encode()
                info.size = len(data)
            else:
                info.type = {
                    "dir": tarfile.DIRTYPE,
                    "sym": tarfile.SYMTYPE,
                    "hard": tarfile.LNKTYPE,
                    "chr": tarfile.CHRTYPE,
                    "fifo": tarfile.FIFOTYPE,
                }[kind]
                info.linkname = str(payload)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "artifacts" / "job"


def _everything(tmp_path: Path) -> set[str]:
    return {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}


def test_plain_members_are_written(dest: Path) -> None:
    report = safe_extract(
        _tar(("dir", "out", ""), ("file", "out/a.txt", "a"), ("file", "b/c.txt", "c")), dest
    )
    assert (dest / "out/a.txt").read_text() == "a"
    assert (dest / "b/c.txt").read_text() == "c"
    assert report.rejected == []


def test_dotdot_absolute_and_link_out_are_rejected_nothing_written_outside(
    tmp_path: Path, dest: Path
) -> None:
    hostile = _tar(
        ("file", "../evil", "x"),
        ("file", "a/../../evil2", "x"),
        ("file", "/etc/x", "x"),
        ("sym", "escape", "/etc"),
        ("sym", "up", "../.."),
        ("file", "escape/passwd", "x"),  # would go through the link, had it been made
        ("file", "up/evil3", "x"),
        ("file", "good.txt", "fine"),
    )
    report = safe_extract(hostile, dest)
    outside = {p for p in _everything(tmp_path) if not p.startswith("artifacts/job/")}
    assert outside == {"artifacts", "artifacts/job"}
    assert [name for name, _ in report.rejected] == [
        "../evil",
        "a/../../evil2",
        "/etc/x",
        "escape",
        "up",
    ]
    assert report.written == ["escape/passwd", "up/evil3", "good.txt"]
    assert not (dest / "escape").is_symlink()  # a plain folder inside instead


def test_nothing_is_written_through_an_inside_link(tmp_path: Path, dest: Path) -> None:
    # `link` points inside, but a member under it must still not pass through it.
    report = safe_extract(
        _tar(("dir", "d", ""), ("sym", "link", "d"), ("file", "link/x", "x")), dest
    )
    assert ("link/x", "'link' is a link or file, not a folder") in report.rejected
    assert not (dest / "d" / "x").exists()


def test_link_made_harmful_by_a_later_link_is_removed(tmp_path: Path, dest: Path) -> None:
    # `x` -> d/l/.. looks inside while d/l does not exist; `d/l` -> .. then makes it lead out.
    report = safe_extract(
        _tar(("dir", "d", ""), ("sym", "x", "d/l/../.."), ("sym", "d/l", "..")), dest
    )
    assert not (dest / "x").is_symlink()
    assert ("x", "symlink leads out of the folder") in report.rejected


def test_links_staying_inside_are_kept(dest: Path) -> None:
    report = safe_extract(_tar(("file", "data/a.txt", "a"), ("sym", "latest", "data/a.txt")), dest)
    assert (dest / "latest").read_text() == "a"
    assert report.rejected == []


def test_devices_and_fifos_are_rejected(dest: Path) -> None:
    report = safe_extract(_tar(("chr", "null", ""), ("fifo", "pipe", "")), dest)
    assert [name for name, _ in report.rejected] == ["null", "pipe"]
    assert list(dest.iterdir()) == []


def test_hard_links_are_copies_of_inside_files_only(tmp_path: Path, dest: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    report = safe_extract(
        _tar(("file", "a", "a"), ("hard", "b", "a"), ("hard", "c", str(secret))), dest
    )
    assert (dest / "b").read_text() == "a"
    assert (dest / "b").stat().st_ino != (dest / "a").stat().st_ino
    assert [name for name, _ in report.rejected] == ["c"]
    assert not (dest / "c").exists()


def test_an_existing_symlink_is_replaced_not_followed(tmp_path: Path, dest: Path) -> None:
    outside = tmp_path / "victim"
    outside.write_text("untouched")
    dest.mkdir(parents=True)
    (dest / "f").symlink_to(outside)  # left by an earlier attempt, say
    safe_extract(_tar(("file", "f", "new")), dest)
    assert outside.read_text() == "untouched"
    assert not (dest / "f").is_symlink()
    assert (dest / "f").read_text() == "new"


def test_modes_drop_setuid_and_world_write(dest: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("tool")
        info.mode = 0o6777
        tar.addfile(info, io.BytesIO(b""))
    buf.seek(0)
    safe_extract(buf, dest)
    assert (dest / "tool").stat().st_mode & 0o7777 == 0o755


def test_garbage_is_a_tar_error(dest: Path) -> None:
    with pytest.raises(tarfile.TarError):
        safe_extract(io.BytesIO(b"this is not a tar archive" * 40), dest)
