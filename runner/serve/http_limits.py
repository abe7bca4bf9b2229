"""What an unauthenticated client can hold of the queue server: a bounded time, a bounded number
of sockets, and no request body.

- `TokenGate` answers 401 (and closes the connection) before a byte of the body is read unless
  the request carries the API token or a dashboard session; `/healthz` and the dashboard's
  login form are the exceptions, the form with a small body cap. `/docs` and `/openapi.json`
  are behind it too.
- `HeaderDeadline` (a uvicorn HTTP protocol) closes a connection that has not sent a request's
  headers within `HEADER_TIMEOUT_S` of opening or of its last response; uvicorn's own
  keep-alive timeout is reset by every byte, so a client trickling a header held a socket
  forever. It also bounds how many such waiting connections one client address
  (`WAITING_PER_ADDRESS`) and all clients (`MAX_WAITING`) hold: past either, the one that has
  waited longest is closed. Without that, 100 connections sending partial headers filled
  uvicorn's connection limit and every authenticated request got 503.
  A connection whose request body is still coming stays counted the same way (per address and
  in all) until the body is in: one address trickling 300 login bodies held every slot.
- `BodyLimit` (middleware.py) gives the whole body `BODY_TIMEOUT_S`.
- `uvicorn_limits()` caps the requests in progress (503 past it) and keeps uvicorn's keep-alive
  and h11 header-size bounds explicit.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_REQUESTS = 100  # in progress at once that are always served (uvicorn's 503 comes later)
# Connections waiting for a request's head (new, or kept alive after a reply): a browser opens
# six per host, so an address gets a few times that; all clients together get as many as
# requests may be in progress twice over. Bounded, so the waiting never crowd out the served.
WAITING_PER_ADDRESS = 24
MAX_WAITING = 2 * MAX_REQUESTS
KEEP_ALIVE_S = 5.0
MAX_HEADER_BYTES = 16 * 1024  # h11's bound on an incomplete request head
LOGIN_BODY_BYTES = 8 * 1024  # a login form holds one token
_OPEN = frozenset({"/healthz", "/login"})
_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})
_DOCS = frozenset({"/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"})


class TokenGate:
    """Authenticate from the headers alone, before any body is read. `session_ok` says whether
    a dashboard session cookie is valid (the dashboard's own pages then check it again)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        session_ok: Callable[[str | None], bool],
        cookie_name: str,
    ) -> None:
        self.app = app
        self._token = f"Bearer {token}".encode()
        self._session_ok = session_ok
        self._cookie = cookie_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "\x00" in scope.get("path", ""):
            # No route takes a NUL, and a file path with one raises deep inside (a 500).
            await _reply(send, 400, b'{"detail":"a NUL in the path"}', close=True)
            return
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        if _is_page(scope.get("path", "")):  # a browser: to the login form, as the pages do
            await _redirect(send, "/login")
            return
        await _reply(send, 401, b'{"detail":"a bearer token is required"}', close=True)

    def _allowed(self, scope: Scope) -> bool:
        path, method = scope.get("path", ""), scope.get("method", "GET")
        headers = dict(scope["headers"])
        if path in _OPEN:
            return path != "/login" or method in _NO_BODY or _small(headers, LOGIN_BODY_BYTES)
        if self._authenticated(headers):
            return True
        # Bodiless dashboard pages check their session themselves (and redirect to /login).
        return method in _NO_BODY and path not in _DOCS and not _has_body(headers)

    def _authenticated(self, headers: dict[bytes, bytes]) -> bool:
        given = headers.get(b"authorization", b"")
        if given and hmac.compare_digest(given, self._token):
            return True
        return self._session_ok(_cookie(headers.get(b"cookie", b""), self._cookie))


def _is_page(path: str) -> bool:
    return path in ("/", "/logout") or path.startswith("/ui/")


async def _redirect(send: Send, where: str) -> None:
    headers = [(b"location", where.encode()), (b"content-length", b"0"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _has_body(headers: dict[bytes, bytes]) -> bool:
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0") not in (b"0",)


def _small(headers: dict[bytes, bytes], limit: int) -> bool:
    length = headers.get(b"content-length")
    return b"transfer-encoding" not in headers and (
        length is None or (length.isdigit() and int(length) <= limit)
    )


def _cookie(header: bytes, name: str) -> str | None:
    try:
        jar = SimpleCookie(header.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


async def _reply(send: Send, status: int, body: bytes, *, close: bool) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def body_timed_out(send: Send, timeout_s: float) -> None:
    """The 408 a body that took too long gets (the connection is closed after it)."""
    detail = f'{{"detail":"the body did not arrive within {timeout_s:g} s"}}'.encode()
    await _reply(send, 408, detail, close=True)


async def receive_within(receive: Receive, deadline: float) -> dict[str, Any] | None:
    """The next ASGI message, or None once the loop's clock passes `deadline`."""
    remaining = deadline - asyncio.get_running_loop().time()
    if remaining <= 0:
        return None
    try:
        return dict(await asyncio.wait_for(receive(), remaining))
    except asyncio.TimeoutError:
        return None


class Waiting:
    """The connections waiting for a request's head, oldest first: all of them and by client
    address. Those that never sent a whole head (`fresh`) make room before those kept alive
    after a reply: a client that was served keeps its connection while new ones crowd in.
    Used on the event loop's thread only."""

    def __init__(self, per_address: int = WAITING_PER_ADDRESS, total: int = MAX_WAITING) -> None:
        self.per_address = per_address
        self.total = total
        # dicts keep insertion order: oldest first. [fresh, kept alive], in all and by address
        self._all: tuple[dict[HeaderDeadline, str], dict[HeaderDeadline, str]] = ({}, {})
        self._by_address: dict[str, tuple[dict[HeaderDeadline, str], ...]] = {}

    def add(self, conn: HeaderDeadline, address: str, fresh: bool) -> HeaderDeadline | None:
        """Count `conn` as waiting; the connection to close to make room for it, if any."""
        mine = self._by_address.setdefault(address, ({}, {}))
        oldest = None
        if sum(map(len, mine)) >= self.per_address:
            oldest = _first(mine)
        elif len(self) >= self.total:
            oldest = _first(self._all)
        if oldest is not None:
            self.discard(oldest)
        kind = 0 if fresh else 1
        mine[kind][conn] = address
        self._all[kind][conn] = address
        return oldest

    def discard(self, conn: HeaderDeadline) -> None:
        for kind in self._all:
            address = kind.pop(conn, None)
            if address is not None:
                mine = self._by_address[address]
                for group in mine:
                    group.pop(conn, None)
                if not any(mine):
                    del self._by_address[address]
                return

    def __len__(self) -> int:
        return sum(map(len, self._all))


def _first(groups: tuple[dict[HeaderDeadline, str], ...]) -> HeaderDeadline | None:
    """The oldest of the first group that has any."""
    for group in groups:
        if group:
            return next(iter(group))
    return None


def address_of(client: tuple[str, int] | None) -> str:
    """Whom a connection is counted against: its IPv4 address, or its IPv6 /64 (one host
    holds a whole /64, and would take a new address for every connection)."""
    if not client:
        return ""
    try:
        ip = ipaddress.ip_address(client[0])
    except ValueError:
        return client[0]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head, and a bounded number
    of connections waiting for one (per address and in all: see `Waiting`)."""

    header_timeout_s = HEADER_TIMEOUT_S
    waiting: Waiting = Waiting()  # uvicorn_limits gives each server its own
    _deadline: asyncio.TimerHandle | None = None
    _address = ""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._address = address_of(self.client)
        self._arm(fresh=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm(fresh=False)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        self._stop_clock()  # a request's head has arrived: BodyLimit times its body
        if self.conn.their_state is not h11.SEND_BODY:
            # The whole request is in: the server's work now, no longer the client's to hold.
            # Until then (a body still coming, maybe one byte a second) the connection stays
            # counted against its address, as a head does: 300 slow login bodies from one
            # address filled uvicorn's connection limit and every other request got 503.
            self.waiting.discard(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, fresh: bool) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)
            crowded_out = self.waiting.add(self, self._address, fresh)
            if crowded_out is not None:
                crowded_out._expired()

    def _disarm(self) -> None:
        self.waiting.discard(self)
        self._stop_clock()

    def _stop_clock(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._disarm()
        cycle = self.cycle
        unfinished = self.conn.their_state is h11.SEND_BODY  # crowded out mid-body
        if cycle is None or cycle.response_complete or unfinished:
            self.transport.close()
            # Not counted against uvicorn's limit from now: connection_lost comes a loop turn
            # later, and a burst of new connections crowding old ones out filled it meanwhile.
            self.connections.discard(self)


def uvicorn_limits(
    header_timeout_s: float = HEADER_TIMEOUT_S,
    waiting_per_address: int = WAITING_PER_ADDRESS,
    max_waiting: int = MAX_WAITING,
) -> dict[str, Any]:
    """The uvicorn.Config settings that bound what a client holds."""
    protocol = type(
        "HeaderDeadlineH11",
        (HeaderDeadline,),
        {
            "header_timeout_s": header_timeout_s,
            "waiting": Waiting(waiting_per_address, max_waiting),
        },
    )
    return {
        "http": protocol,
        # uvicorn counts every open connection against this, waiting ones included: those
        # are bounded by `max_waiting` above, so what is left is for requests in progress.
        "limit_concurrency": MAX_REQUESTS + max_waiting,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
