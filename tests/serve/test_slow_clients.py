"""Unauthenticated slow clients cannot take `serve` down (issue 25, medium).

The attack found: 100 connections sending partial headers, refreshed every few seconds, filled
uvicorn's connection limit, and every authenticated API and dashboard request got 503. Here a
real `clore-run serve` process on loopback is held by 500 such connections from one address
(127.0.0.2) while an authenticated client on another (127.0.0.1) uses the API and the
dashboard: every one of its requests must succeed. Real sockets; every loop is bounded by a
count or a deadline; nothing sleeps to wait for the server (a reply or EOF is what we wait on).
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runner.serve.dashboard.session import COOKIE
from runner.serve.http_limits import WAITING_PER_ADDRESS, Waiting, address_of
from tests.serve.harness import TOKEN, ServeProcess, start_serve, stop_and_show

SLOW_CLIENTS = 500
ATTACKER = "127.0.0.2"  # Linux answers on all of 127.0.0.0/8
PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: x\r\nX-a: "
REQUESTS_EACH = 40  # authenticated API requests, and as many dashboard pages


class SlowClients:
    """`count` connections from `source` that send a partial head and never finish it; one
    the server closes is opened again on the next refresh, as the attacker's tool did."""

    def __init__(self, port: int, source: str, count: int) -> None:
        self.port, self.source, self.count = port, source, count
        self.socks: list[socket.socket | None] = [None] * count
        self.reopened = 0
        self._selector = selectors.DefaultSelector()

    def open_all(self) -> None:
        for i in range(self.count):
            self._open(i)

    def _open(self, i: int) -> None:
        sock = socket.create_connection(
            ("127.0.0.1", self.port), timeout=5, source_address=(self.source, 0)
        )
        sock.sendall(PARTIAL_HEAD)
        sock.setblocking(False)
        self.socks[i] = sock
        self._selector.register(sock, selectors.EVENT_READ, i)

    def refresh(self) -> None:
        """Reopen what the server closed (EOF or reset); a byte more on the rest."""
        for key, _ in self._selector.select(timeout=0):
            sock, i = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            with contextlib.suppress(OSError):
                if sock.recv(4096):
                    continue  # an answer (none is expected): leave it open
            self._selector.unregister(sock)
            sock.close()
            self._open(i)
            self.reopened += 1
        for sock in self.socks:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.send(b"a")

    def close(self) -> None:
        for sock in self.socks:
            if sock is not None:
                sock.close()
        self._selector.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = SLOW_CLIENTS * 2 + 256  # our sockets, and the server's (a child inherits this)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    server = start_serve(tmp_path / "q.db", "--backend", "local")
    try:
        yield server
    finally:
        stop_and_show([server])
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_authenticated_client_is_served_while_500_slow_clients_hold_on(
    serve: ServeProcess,
) -> None:
    port = int(serve.api.url.rsplit(":", 1)[1])
    slow = SlowClients(port, ATTACKER, SLOW_CLIENTS)
    stop = threading.Event()
    refreshes = 0

    def keep_holding() -> None:
        nonlocal refreshes
        deadline = time.monotonic() + 120
        while not stop.wait(0.25) and time.monotonic() < deadline:  # the attacker's pace
            slow.refresh()
            refreshes += 1

    try:
        slow.open_all()
        # A reply (any: before the fix it was a 503) to a later connection: by then the server
        # has accepted every earlier one (its listen queue is first in, first out).
        requests.get(f"{serve.api.url}/healthz", timeout=30)
        holder = threading.Thread(target=keep_holding, daemon=True)
        holder.start()
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {TOKEN}"
        browser = requests.Session()
        login = browser.post(f"{serve.api.url}/login", data={"token": TOKEN}, timeout=30)
        assert COOKIE in browser.cookies or login.status_code == 503, login.status_code
        codes = []
        for _ in range(REQUESTS_EACH):
            codes.append(api.get(f"{serve.api.url}/jobs", timeout=30).status_code)
            codes.append(browser.get(f"{serve.api.url}/ui/spend", timeout=30).status_code)
        stop.set()
        holder.join(timeout=30)
    finally:
        stop.set()
        slow.close()
    served = codes.count(200) / len(codes)
    print(
        f"authenticated requests served while {SLOW_CLIENTS} slow connections were held: "
        f"{served:.0%} ({codes.count(200)}/{len(codes)}); slow connections reopened after the "
        f"server closed them: {slow.reopened} over {refreshes} refreshes"
    )
    assert served == 1.0, sorted(set(codes))
    # The server held at most WAITING_PER_ADDRESS of the attacker's: the rest were closed.
    assert slow.reopened >= SLOW_CLIENTS - WAITING_PER_ADDRESS


def test_the_connection_waiting_longest_makes_room_per_address_and_in_all() -> None:
    waiting = Waiting(per_address=2, total=3)
    a1, a2, a3, b1, c1 = (object() for _ in range(5))
    assert waiting.add(a1, "a") is None  # type: ignore[arg-type]
    assert waiting.add(a2, "a") is None  # type: ignore[arg-type]
    assert waiting.add(a3, "a") is a1  # type: ignore[arg-type]  # the address's oldest
    assert waiting.add(b1, "b") is None  # type: ignore[arg-type]
    assert waiting.add(c1, "c") is a2  # type: ignore[arg-type]  # the oldest of all
    waiting.discard(b1)  # type: ignore[arg-type]
    waiting.discard(b1)  # type: ignore[arg-type]  # twice is harmless
    assert len(waiting) == 2


@pytest.mark.parametrize(
    ("client", "counted_as"),
    [
        (("127.0.0.2", 5), "127.0.0.2"),
        (("2001:db8::1", 5), "2001:db8::/64"),
        (("2001:db8::2:1", 5), "2001:db8::/64"),
        (("::ffff:10.0.0.1", 5), "10.0.0.1"),
        (None, ""),
    ],
)
def test_an_ipv6_host_is_counted_by_its_64(client: tuple[str, int] | None, counted_as: str) -> None:
    assert address_of(client) == counted_as
