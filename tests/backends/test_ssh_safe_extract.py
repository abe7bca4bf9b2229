"""Artifacts from a hostile server cannot write outside their folder."""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path

import pytest

from runner.backends.safe_extract import MAX_REFUSALS_LISTED, safe_extract


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


# --- what a hostile server can do with sizes, sparse maps, headers and broken streams ---


class _Endless(io.RawIOBase):
    """`head`, then `filler` repeated without end; fails the test once `limit` bytes were read
    (so a missing bound shows as a failure, not as a hang or a full disk)."""

    def __init__(self, head: bytes, filler: bytes = bytes(512), limit: int = 64 << 20) -> None:
        super().__init__()
        self._head = head
        self._filler = filler
        self._limit = limit
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.read_bytes > self._limit:
            raise AssertionError(f"read past {self._limit} bytes: nothing bounded the stream")
        data = self._head[: len(buffer)]
        self._head = self._head[len(data) :]
        while len(data) < len(buffer):
            data += self._filler[: len(buffer) - len(data)]
        buffer[: len(data)] = data
        self.read_bytes += len(data)
        return len(data)


def _header(info: tarfile.TarInfo, fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    return info.tobuf(fmt, "utf-8", "surrogateescape")


def _block(data: bytes) -> bytes:
    return data + bytes(-len(data) % tarfile.BLOCKSIZE)


def _old_gnu_sparse(name: str, realsize: int) -> bytes:
    """A GNU tar 'S' member (what `tar --sparse` writes): one data byte at the very end."""
    info = tarfile.TarInfo(name)
    info.size = 1
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(_header(info, tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(realsize - 1, 12, tarfile.GNU_FORMAT)  # offset
    header[398:410] = tarfile.itn(1, 12, tarfile.GNU_FORMAT)  # numbytes
    header[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)  # realsize
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header) + _block(b"x")


def _pax_sparse_1_0(name: str, realsize: int) -> bytes:
    """A PAX 1.0 sparse member (what `tar --sparse --format=pax` writes)."""
    sparse_map = _block(b"1\n%d\n1\n" % (realsize - 1))
    info = tarfile.TarInfo(name)
    info.size = len(sparse_map) + 1
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(realsize),
    }
    return _header(info, tarfile.PAX_FORMAT) + sparse_map + _block(b"x")


@pytest.mark.parametrize("member", [_old_gnu_sparse, _pax_sparse_1_0])
def test_sparse_files_are_refused_not_inflated(tmp_path: Path, dest: Path, member: object) -> None:
    # 1.5 KiB of archive would otherwise become 256 MiB on disk (or terabytes: the size is free).
    archive = member("big", 256 << 20) + bytes(1024)  # type: ignore[operator]
    with pytest.raises(tarfile.TarError, match="sparse"):
        safe_extract(io.BytesIO(archive), dest)
    assert not (dest / "big").exists()


def test_writing_stops_at_the_size_limit(dest: Path) -> None:
    archive = _tar(("file", "a", "a" * 600), ("file", "b", "b" * 600), ("file", "c", "c"))
    report = safe_extract(archive, dest, max_bytes=1000)
    assert report.written == ["a"]
    assert [name for name, _ in report.rejected] == ["b"]
    assert "1000 bytes" in report.rejected[0][1]
    assert sorted(p.name for p in dest.iterdir()) == ["a"]  # `c` came after the limit


def test_hard_link_copies_count_against_the_size_limit(dest: Path) -> None:
    # Each hard link is a 512-byte header but a full copy on disk.
    links = [("hard", f"copy{i}", "a") for i in range(20)]
    report = safe_extract(_tar(("file", "a", "a" * 1000), *links), dest, max_bytes=4000)
    on_disk = sum(p.stat().st_size for p in dest.iterdir())
    assert on_disk <= 4000
    assert report.rejected and "4000 bytes" in report.rejected[0][1]


@pytest.mark.slow
def test_an_endless_stream_of_headers_stops_at_the_limit(dest: Path) -> None:
    info = tarfile.TarInfo("d")
    info.type = tarfile.DIRTYPE
    stream = _Endless(b"", _header(info))
    with contextlib.suppress(tarfile.TarError):
        safe_extract(stream, dest, max_bytes=1 << 20)  # type: ignore[arg-type]
    assert stream.read_bytes < 4 << 20


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_huge_extended_header_is_refused_before_it_is_read(dest: Path, kind: bytes) -> None:
    # tarfile reads a pax or long-name header whole into memory: 1 TiB claimed here.
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = kind
    info.size = 1 << 40
    stream = _Endless(_header(info, tarfile.GNU_FORMAT), b"9" * 512)
    with pytest.raises(tarfile.TarError):
        safe_extract(stream, dest)  # type: ignore[arg-type]
    assert stream.read_bytes < 4 << 20


def test_many_global_headers_are_refused(dest: Path) -> None:
    # Global pax headers accumulate for the whole archive: each one small, endless in number.
    def global_header(i: int) -> bytes:
        record = f"comment{i}={'x' * 900}\n".encode()
        record = b"%d %s" % (len(record) + 5, record)
        info = tarfile.TarInfo("././@PaxHeader")
        info.type = tarfile.XGLTYPE
        info.size = len(record)
        return _header(info) + _block(record)

    head = b"".join(global_header(i) for i in range(5000))
    stream = _Endless(head)
    with pytest.raises(tarfile.TarError):
        safe_extract(stream, dest)  # type: ignore[arg-type]
    assert stream.read_bytes < 4 << 20


def test_a_long_chain_of_headers_is_a_tar_error(dest: Path) -> None:
    record = b"18 comment=aaaaaa\n"
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = len(record)
    chain = (_header(info) + _block(record)) * 3000
    with pytest.raises(tarfile.TarError):
        safe_extract(io.BytesIO(chain + bytes(1024)), dest)


def test_links_are_checked_even_when_the_stream_breaks_off(dest: Path) -> None:
    # As in test_link_made_harmful_by_a_later_link_is_removed, then a member cut short.
    good = _tar(("dir", "d", ""), ("sym", "x", "d/l/../.."), ("sym", "d/l", "..")).getvalue()
    cut = tarfile.TarInfo("cut")
    cut.size = 10_000
    archive = good[: 3 * tarfile.BLOCKSIZE] + _header(cut) + b"partial"  # 3 headers, no data
    with pytest.raises(tarfile.TarError):
        safe_extract(io.BytesIO(archive), dest)
    assert not (dest / "x").is_symlink()


def test_links_from_an_earlier_extraction_are_checked_again(dest: Path) -> None:
    # A retry extracts into the same folder. `x` is harmless after the first attempt (d/l is
    # missing); the second attempt's `d/l` -> .. makes it lead out.
    safe_extract(_tar(("sym", "x", "d/l/../..")), dest)
    report = safe_extract(_tar(("dir", "d", ""), ("sym", "d/l", "..")), dest)
    assert not (dest / "x").is_symlink()
    assert ("x", "symlink leads out of the folder") in report.rejected


def test_refusals_past_the_first_few_are_counted_not_listed(dest: Path) -> None:
    """50,000 refused device members made a 6.4 MB attempt message."""
    members = [("chr", f"dev{i}", "") for i in range(300)]
    report = safe_extract(_tar(*members, ("file", "ok.txt", "ok")), dest)
    assert len(report.rejected) == MAX_REFUSALS_LISTED
    assert report.more_refused == 300 - MAX_REFUSALS_LISTED
    assert (dest / "ok.txt").read_text() == "ok"


def test_members_past_the_count_limit_are_left_out(dest: Path) -> None:
    members = [("file", f"f{i}.txt", "x") for i in range(30)]
    report = safe_extract(_tar(*members), dest, max_members=10)
    assert sorted(p.name for p in dest.iterdir()) == sorted(f"f{i}.txt" for i in range(10))
    assert report.rejected[-1] == (
        "f10.txt",
        "over the limit of 10 members for a job's artifacts; the rest was left out",
    )


def test_a_file_over_the_per_file_limit_is_refused_the_rest_written(dest: Path) -> None:
    report = safe_extract(
        _tar(("file", "big.bin", b"x" * 5000), ("file", "small.txt", "s")),
        dest,
        max_file_bytes=4096,
    )
    assert not (dest / "big.bin").exists() and (dest / "small.txt").read_text() == "s"
    assert report.rejected == [("big.bin", "5000 bytes, over the limit of 4096 for one file")]


@pytest.mark.parametrize(
    "name",
    ["bad\nname.txt", "esc\x1b[31m.txt", "dir\r/inner.txt", "bell\x07", "c1\x9b.txt", "rtl\u202e"],
)
def test_a_member_whose_name_holds_a_control_character_is_refused(
    tmp_path: Path, dest: Path, name: str
) -> None:
    """Issue 25: a newline or ESC in a name broke upload-artifact and terminals listing it."""
    report = safe_extract(_tar(("file", name, "x"), ("file", "ok.txt", "ok")), dest)
    assert report.written == ["ok.txt"]
    assert [(n, "control character" in why) for n, why in report.rejected] == [(name, True)]
    assert _everything(dest) == {"ok.txt"}
