"""What unauthenticated clients hold of a `clore-run serve`: its RSS and its sockets.

N clients send a POST /jobs head announcing a 1 MiB body and then the body minus its last byte,
M clients send an unfinished request head; all of them then wait. The server's RSS (VmRSS) is
read before and after, and how many of those sockets it still holds once its header deadline
has passed. Loopback only; every loop is bounded (counts and a deadline).

    python benchmarks/bench_serve_exhaustion.py [--quick] [--repo PATH]

`--repo` runs the server from another checkout (e.g. an older commit) for a before/after.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-" + "x" * 40
BODY = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 bodies and 5 heads")
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--hold-s", type=float, default=12.0, help="how long the clients wait")
    args = parser.parse_args()
    bodies, heads = (20, 5) if args.quick else (200, 30)
    with tempfile.TemporaryDirectory() as tmp:
        server, port = start(args.repo, Path(tmp))
        try:
            before = rss_mb(server.pid)
            socks = [slow_body(port) for _ in range(bodies)] + [
                slow_head(port) for _ in range(heads)
            ]
            time.sleep(2.0)  # a benchmark, not a test: let the server take it all in
            loaded = rss_mb(server.pid)
            held_bodies = open_count(socks[:bodies], args.hold_s)
            held_heads = open_count(socks[bodies:], 0.0)
            after = rss_mb(server.pid)
            for sock in socks:
                sock.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"server from {args.repo}")
    print(f"{bodies} slow unauthenticated bodies + {heads} slow heads")
    print(
        f"RSS before {before:.0f} MB, under load {loaded:.0f} MB, "
        f"after {args.hold_s:g} s {after:.0f} MB"
    )
    print(
        f"still open after {args.hold_s:g} s: {held_bodies}/{bodies} bodies, "
        f"{held_heads}/{heads} heads"
    )


def start(repo: Path, tmp: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "CLORE_RUN_TOKEN": TOKEN, "PYTHONPATH": str(repo)}
    env.pop("CLORE_API_KEY", None)
    entry = (
        "import sys; from runner.cli import app, main; from runner.cli.serve import register; "
        "register(app); main(sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            entry,
            "serve",
            "--port",
            "0",
            "--db",
            str(tmp / "q.db"),
            "--backend",
            "local",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    found = re.search(r"listening on http://[^:]+:(\d+)", line)
    if not found:
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    return proc, int(found.group(1))


def slow_body(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BODY}\r\n\r\n"
    )
    sock.sendall(head.encode())
    sock.setblocking(False)
    chunk, sent = b"x" * 65536, 0
    deadline = time.monotonic() + 5
    while sent < BODY - 1 and time.monotonic() < deadline:  # all but the last byte
        try:
            sent += sock.send(chunk[: BODY - 1 - sent])
        except BlockingIOError:
            select.select([], [sock], [], 0.05)
        except OSError:
            break  # the server closed it: what the fix should do
    return sock


def slow_head(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    sock.setblocking(False)
    return sock


def open_count(socks: list[socket.socket], wait_s: float) -> int:
    """How many are still open after `wait_s` (a closed one reads EOF or fails)."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        time.sleep(0.25)
    held = 0
    for sock in socks:
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
        except BlockingIOError:
            held += 1
        except OSError:
            pass
    return held


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kb = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]
    return kb / 1024


if __name__ == "__main__":
    main()
