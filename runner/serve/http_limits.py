"""What an unauthenticated client can hold of the queue server: a bounded time, a bounded number
of sockets, and no request body.

- `TokenGate` answers 401 (and closes the connection) before a byte of the body is read unless
  the request carries the API token or a dashboard session; `/healthz` and the dashboard's
  login form are the exceptions, the form with a small body cap. `/docs` and `/openapi.json`
  are behind it too.
- `HeaderDeadline` (a uvicorn HTTP protocol) closes a connection that has not sent a request's
  headers within `HEADER_TIMEOUT_S` of opening or of its last response; uvicorn's own
  keep-alive timeout is reset by every byte, so a client trickling a header held a socket
  forever.
- `BodyLimit` (middleware.py) gives the whole body `BODY_TIMEOUT_S`.
- `uvicorn_limits()` caps the connections (503 past it) and keeps uvicorn's keep-alive and h11
  header-size bounds explicit.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 100
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


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head."""

    header_timeout_s = HEADER_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._disarm()  # a request's head has arrived

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()


def uvicorn_limits(header_timeout_s: float = HEADER_TIMEOUT_S) -> dict[str, Any]:
    """The uvicorn.Config settings that bound what a client holds."""
    protocol = type("HeaderDeadlineH11", (HeaderDeadline,), {"header_timeout_s": header_timeout_s})
    return {
        "http": protocol,
        "limit_concurrency": MAX_CONNECTIONS,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
