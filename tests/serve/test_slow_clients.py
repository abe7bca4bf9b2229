"""Unauthenticated slow clients cannot take `serve` down (issue 25, medium).

The attack found: 100 connections sending partial headers, refreshed every few seconds, filled
uvicorn's connection limit, and every authenticated API and dashboard request got 503. Here a
real `clore-run serve` process on loopback is held by 500 such connections from one address
(127.0.0.2, then the client's own) while an authenticated client on 127.0.0.1 uses the API and
the dashboard: every one of its requests must succeed. Real sockets; every loop is bounded by a
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
        self.socks[i] = None
        try:
            sock = socket.create_connection(
                ("127.0.0.1", self.port), timeout=5, source_address=(self.source, 0)
            )
            sock.sendall(PARTIAL_HEAD)
        except OSError:
            return  # closed at once: the next round opens it again
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
        for i, sock in enumerate(self.socks):
            if sock is None:
                self._open(i)
                self.reopened += 1
                continue
            with contextlib.suppress(OSError):
                sock.send(b"a")

    def close(self) -> None:
        for sock in self.socks:
            if sock is not None:
                sock.close()
        self._selector.close()


@contextlib.contextmanager
def serve_for_sockets(tmp_path: Path, sockets: int) -> Iterator[ServeProcess]:
    """A local serve, the file limit raised for `sockets` held by the test and as many by the
    server (a child inherits the limit), put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = sockets * 2 + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    server = start_serve(tmp_path / "q.db", "--backend", "local")
    try:
        yield server
    finally:
        stop_and_show([server])
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve_for_sockets(tmp_path, SLOW_CLIENTS) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("attacker", [ATTACKER, "127.0.0.1"], ids=["elsewhere", "same-address"])
def test_an_authenticated_client_is_served_while_500_slow_clients_hold_on(
    serve: ServeProcess, attacker: str
) -> None:
    """From another address; and from the client's own (behind one NAT, say), where the
    client's kept-alive connections outlast the attacker's fresh ones."""
    outcomes, reopened, rounds = hold_and_use(serve, attacker)
    served = outcomes.count(200) / len(outcomes)
    print(
        f"slow clients from {attacker}: authenticated requests served while {SLOW_CLIENTS} "
        f"slow connections were held: {served:.0%} ({outcomes.count(200)}/{len(outcomes)}); "
        f"slow connections reopened after the server closed them: {reopened} over {rounds} "
        "rounds"
    )
    assert served == 1.0, sorted(set(map(str, outcomes)))
    # The server held at most WAITING_PER_ADDRESS of the attacker's: the rest were closed,
    # every round.
    assert reopened >= (SLOW_CLIENTS - WAITING_PER_ADDRESS) * (rounds - 1)


def hold_and_use(serve: ServeProcess, attacker: str) -> tuple[list[int | str], int, int]:
    """500 slow connections from `attacker`, refreshed every quarter second by a thread, while
    this thread makes authenticated API and dashboard requests from 127.0.0.1: at least
    REQUESTS_EACH of each, and on through six of the attacker's rounds. Each request's status,
    or "reset" when its connection was cut; how many slow connections were reopened; rounds."""
    port = int(serve.api.url.rsplit(":", 1)[1])
    slow = SlowClients(port, attacker, SLOW_CLIENTS)
    stop = threading.Event()
    rounds = 0

    def keep_holding() -> None:
        nonlocal rounds
        deadline = time.monotonic() + 120
        while not stop.wait(0.25) and time.monotonic() < deadline:  # the attacker's pace
            slow.refresh()
            rounds += 1

    holder = threading.Thread(target=keep_holding, daemon=True)
    outcomes: list[int | str] = []
    try:
        slow.open_all()
        # A reply (any: before the fix it was a 503) to a later connection: by then the server
        # has accepted every earlier one (its listen queue is first in, first out).
        requests.get(f"{serve.api.url}/healthz", timeout=30)
        slow.refresh()  # the attacker's first round: what the server closed comes back
        rounds += 1
        holder.start()
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {TOKEN}"
        browser = requests.Session()
        login = browser.post(f"{serve.api.url}/login", data={"token": TOKEN}, timeout=30)
        assert COOKIE in browser.cookies or login.status_code == 503, login.status_code
        deadline = time.monotonic() + 60
        while (len(outcomes) < 2 * REQUESTS_EACH or rounds < 6) and time.monotonic() < deadline:
            outcomes.append(_status(api, f"{serve.api.url}/jobs"))
            outcomes.append(_status(browser, f"{serve.api.url}/ui/spend"))
        assert rounds >= 6, "the attacker's rounds did not overlap the requests"
    finally:
        stop.set()
        if holder.is_alive():
            holder.join(timeout=30)
        slow.close()
    return outcomes, slow.reopened, rounds


def _status(session: requests.Session, url: str) -> int | str:
    try:
        return session.get(url, timeout=30).status_code
    except requests.ConnectionError:
        return "reset"


def test_the_connection_waiting_longest_makes_room_per_address_and_in_all() -> None:
    waiting = Waiting(per_address=2, total=3)
    a1, a2, a3, b1, c1 = (object() for _ in range(5))
    assert waiting.add(a1, "a", True) is None  # type: ignore[arg-type]
    assert waiting.add(a2, "a", True) is None  # type: ignore[arg-type]
    assert waiting.add(a3, "a", True) is a1  # type: ignore[arg-type]  # the address's oldest
    assert waiting.add(b1, "b", True) is None  # type: ignore[arg-type]
    assert waiting.add(c1, "c", True) is a2  # type: ignore[arg-type]  # the oldest of all
    waiting.discard(b1)  # type: ignore[arg-type]
    waiting.discard(b1)  # type: ignore[arg-type]  # twice is harmless
    assert len(waiting) == 2


def test_a_connection_kept_alive_after_a_reply_goes_after_the_fresh_ones() -> None:
    waiting = Waiting(per_address=2, total=3)
    kept, new1, new2, other, last = (object() for _ in range(5))
    assert waiting.add(kept, "a", False) is None  # type: ignore[arg-type]  # served before
    assert waiting.add(new1, "a", True) is None  # type: ignore[arg-type]
    assert waiting.add(new2, "a", True) is new1  # type: ignore[arg-type]  # not `kept`
    assert waiting.add(other, "b", False) is None  # type: ignore[arg-type]
    assert waiting.add(last, "c", True) is new2  # type: ignore[arg-type]  # fresh first
    assert waiting.add(object(), "a", True) is last  # type: ignore[arg-type]  # still fresh
    assert len(waiting) == 3  # `kept` and `other` stay


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
