"""SSH performance against the OpenSSH tools, in one run, on a loopback sshd of its own.

    python -m benchmarks.bench_ssh [--mib 200] [--repeat 3]
    python -m benchmarks.bench_ssh --quick    # 2 MiB, one trial: that it runs, not its ratios

Targets: stdout streaming ≥ 1.0× `ssh host 'head -c ...' > /dev/null`; workspace
upload and artifact download ≥ 0.8× `scp`; a trivial command on an open connection ≤ 10 ms.
Both sides open a fresh connection per trial where the OpenSSH tool does (ssh, scp); the best of
`--repeat` trials counts for each. The sshd gives sessions a HOME under tmp (see the fixture), so
the machine user's ~/.bashrc does not weigh on either side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runner.backends.base import Stream
from runner.backends.ssh.connection import Endpoint, SshConnection, connect
from runner.backends.ssh.exec import ExecOptions, RemoteJob, run_job
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from tests.sshd_fixture import SshServer, make_request, start_sshd


class _Discard:
    def __init__(self) -> None:
        self.bytes = 0

    def write(self, stream: Stream, data: bytes) -> None:
        self.bytes += len(data)


def _best(trials: int, fn: Callable[[], object], before: Callable[[], object] = bool) -> float:
    """Best time of `trials` runs of `fn`; `before` (untimed) resets state between them.

    Dirty pages are flushed first, so one trial's disk writeback does not slow the next one
    (both sides write the same 200 MiB to the same disk).
    """
    times = []
    for _ in range(trials):
        before()
        os.sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


class Bench:
    def __init__(
        self, server: SshServer, work: Path, mib: int, repeat: int, commands: int = 200
    ) -> None:
        self.server = server
        self.work = work
        self.mib = mib
        self.repeat = repeat
        self.commands = commands
        self.key = ClientKey.from_file(server.client_key)
        self.ssh_opts = [
            "-i", str(server.client_key), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
        ]  # fmt: skip

    def connect(self) -> SshConnection:
        return connect(Endpoint("127.0.0.1", self.server.port), self.key, HostKeyStore())

    def _ssh(self, *args: str, stdout: int | None = None) -> None:
        cmd = ["ssh", "-p", str(self.server.port), *self.ssh_opts, "root@127.0.0.1", *args]
        subprocess.run(cmd, check=True, stdout=stdout)

    def _scp(self, source: str, target: str) -> None:
        cmd = ["scp", "-q", "-r", "-P", str(self.server.port), *self.ssh_opts, source, target]
        subprocess.run(cmd, check=True)

    def _job(self, script: str, out: Path, **kwargs: object) -> None:
        conn = self.connect()
        try:
            request = make_request(script, out, timeout_s=600, **kwargs)  # type: ignore[arg-type]
            outcome = run_job(conn, request, _Discard(), threading.Event())
            assert outcome.failure is None, outcome
        finally:
            conn.close()

    def streaming(self) -> tuple[float, float]:
        command = f"head -c {self.mib}M /dev/zero"

        def ours() -> None:
            sink = _Discard()
            conn = self.connect()
            try:
                request = make_request(command, self.work / "none", timeout_s=600)
                run_job(conn, request, sink, threading.Event())
            finally:
                conn.close()
            assert sink.bytes == self.mib << 20

        theirs = _best(self.repeat, lambda: self._ssh(command, stdout=subprocess.DEVNULL))
        return theirs, _best(self.repeat, ours)

    def upload(self) -> tuple[float, float]:
        """scp -r of the workspace, against a fresh connection + the job's upload step."""
        workspace = self.work / "workspace"
        files = _make_files(workspace, self.mib)
        remote = self.server.folder / "home" / "scp-up"  # loopback: the server's disk is ours
        request = make_request("true", self.work / "none", workspace=workspace, files=files)
        uploaded: list[RemoteJob] = []

        def ours() -> None:
            conn = self.connect()
            job = RemoteJob(conn, request, ExecOptions())
            job.upload(threading.Event())
            uploaded.append(job)

        def clean() -> None:
            shutil.rmtree(remote, ignore_errors=True)
            while uploaded:
                job = uploaded.pop()
                job.remove()
                job.conn.close()

        theirs = _best(
            self.repeat, lambda: self._scp(str(workspace), f"root@127.0.0.1:{remote}"), clean
        )
        result = _best(self.repeat, ours, clean)
        clean()
        return theirs, result

    def download(self) -> tuple[float, float]:
        blob = self.server.folder / "home" / "blob.bin"
        _write_random(blob, self.mib << 20)
        local = self.work / "download"

        def fresh() -> Path:
            shutil.rmtree(local, ignore_errors=True)
            local.mkdir()
            return local

        theirs = _best(self.repeat, lambda: self._scp(f"root@127.0.0.1:{blob}", str(fresh())))
        # The job hard-links the file into its folder: no copy on the server side.
        script = 'ln "$HOME/blob.bin" blob.bin'
        ours = _best(self.repeat, lambda: self._job(script, fresh(), artifacts=("blob.bin",)))
        assert (local / "blob.bin").stat().st_size == self.mib << 20
        return theirs, ours

    def command_ms(self) -> tuple[float, float]:
        """Median ms of `true` on an open connection: OpenSSH multiplexed, and ours."""
        count = self.commands
        control = self.work / "cm"
        base = ["ssh", "-p", str(self.server.port), *self.ssh_opts, "-S", str(control)]
        master = subprocess.Popen([*base, "-M", "-N", "root@127.0.0.1"])
        try:
            _wait_for(control)
            theirs = _median_ms(count // 4, lambda: subprocess.run([*base, "x", "true"]))
        finally:
            master.kill()
            master.wait()
        conn = self.connect()
        try:
            ours = _median_ms(count, lambda: conn.run("true"))
        finally:
            conn.close()
        return theirs, ours


def _median_ms(count: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.01)  # polling for the control socket


def _write_random(path: Path, size: int) -> None:
    with path.open("wb") as f, open("/dev/urandom", "rb") as rnd:
        left = size
        while left:
            chunk = rnd.read(min(left, 1 << 20))
            f.write(chunk)
            left -= len(chunk)


def _make_files(root: Path, mib: int) -> tuple[str, ...]:
    """`mib` MiB of random data as a realistic mix: a few big files and many small ones."""
    root.mkdir(parents=True, exist_ok=True)
    names = []
    small = 200
    for i in range(small):  # 200 × 4 KiB
        name = f"src/module_{i}.py"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        _write_random(root / name, 4096)
        names.append(name)
    big = (mib << 20) - small * 4096
    for i in range(4):
        name = f"data/part{i}.bin"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        _write_random(root / name, big // 4)
        names.append(name)
    return tuple(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args(argv)
    commands = 200
    if args.quick:
        args.mib, args.repeat, commands = 2, 1, 20
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp:
        work = Path(tmp)
        server = start_sshd(work / "sshd")
        try:
            rows = _measure(Bench(server, work, args.mib, args.repeat, commands))
        finally:
            server.kill_all()
    _print(rows, args.mib)
    # At 2 MiB on a busy CI machine the ratios are noise: quick only checks that it runs.
    return 0 if args.quick or all(ok for *_, ok in rows) else 1


def _measure(bench: Bench) -> list[tuple[str, str, str, str, bool]]:
    rows = []
    for name, fn, target in (
        ("stdout streaming", bench.streaming, 1.0),
        ("workspace upload", bench.upload, 0.8),
        ("artifact download", bench.download, 0.8),
    ):
        theirs, ours = fn()
        ratio = theirs / ours
        verdict = f"{ratio:.2f}x (>= {target})"
        rows.append((name, f"{ours:.2f} s", f"{theirs:.2f} s", verdict, ratio >= target))
    theirs_ms, ours_ms = bench.command_ms()
    ours_text, theirs_text = f"{ours_ms:.1f} ms", f"{theirs_ms:.1f} ms"
    rows.append(("command, open conn", ours_text, theirs_text, "<= 10 ms", ours_ms <= 10))
    return rows


def _print(rows: list[tuple[str, str, str, str, bool]], mib: int) -> None:
    header = ("what", "clore-run", "OpenSSH", "ratio (target)", "")
    print(f"SSH on loopback, {mib} MiB transfers, best of trials (OpenSSH: ssh / scp / ssh -S)")
    table = [header, *((n, o, t, r, "ok" if ok else "MISS") for n, o, t, r, ok in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
