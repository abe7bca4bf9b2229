"""Two small ASGI layers: refuse bodies over a size, and count error replies for /metrics."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.serve.http_limits import BODY_TIMEOUT_S, body_timed_out, receive_within

MAX_BODY_BYTES = 1 << 20


class BodyLimit:
    """Bodies over `limit` bytes get 413 before the app sees them. The body is read here in
    full (it is small by definition) and replayed, so a chunked upload is counted as well as
    one with a Content-Length."""

    def __init__(
        self, app: ASGIApp, limit: int = MAX_BODY_BYTES, timeout_s: float = BODY_TIMEOUT_S
    ) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s  # for the whole body: a trickling client must not hold on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limit:
            await _too_large(send, self.limit)
            return
        body = bytearray()
        more = True
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while more:
            message = await receive_within(receive, deadline)
            if message is None:
                await body_timed_out(send, self.timeout_s)
                return
            if message["type"] != "http.request":
                break  # the client went away; let the app see that
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await _too_large(send, self.limit)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: only a disconnect can come
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    payload = json.dumps({"detail": f"the body is over the limit of {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class ErrorTally:
    """Replies with status >= 400, by status, for `clore_run_api_errors_total`."""

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self._lock = threading.Lock()

    def add(self, status: int) -> None:
        with self._lock:
            self._counts[status] += 1

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._counts)


class ErrorCounter:
    """Counts every error reply into a tally, 413s from BodyLimit included (it wraps it)."""

    def __init__(self, app: ASGIApp, tally: ErrorTally) -> None:
        self.app = app
        self.tally = tally

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.tally.add(int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting)
