"""The API key travels in a custom `auth` header, which requests does not drop on a redirect."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from runner.backends.clore import errors as e
from runner.backends.clore.api import CloreClient, RetryPolicy
from runner.backends.clore.ratelimit import RateLimiter
from runner.clock import SystemClock

KEY = "sk-redirect-test-0123456789"


class _Server(http.server.ThreadingHTTPServer):
    seen_keys: list[str | None]
    location: str


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen_keys.append(self.headers.get("auth"))
        if self.server.location:
            self.send_response(302)
            self.send_header("Location", self.server.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"code": 0, "wallets": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return None


def _serve(location: str = "") -> _Server:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen_keys, server.location = [], location
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def elsewhere() -> Iterator[_Server]:
    server = _serve()
    yield server
    server.shutdown()


@pytest.mark.slow
def test_a_redirect_is_not_followed_with_the_key(elsewhere: _Server) -> None:
    api = _serve(f"http://127.0.0.1:{elsewhere.server_address[1]}/v1/wallets")
    try:
        client = CloreClient(
            KEY,
            base_url=f"http://127.0.0.1:{api.server_address[1]}/v1",
            limiter=RateLimiter(SystemClock(), min_interval_s=0, create_interval_s=0),
            retry=RetryPolicy(max_attempts=1),
        )
        with pytest.raises(e.CloreApiError) as caught:
            client.wallets()
    finally:
        api.shutdown()
    assert api.seen_keys == [KEY]
    assert elsewhere.seen_keys == []  # the key never left for the host the reply named
    assert "302" in caught.value.message and KEY not in caught.value.message
