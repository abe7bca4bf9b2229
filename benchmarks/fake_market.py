"""The fake Clore API as the end-to-end benchmarks stand it up: installed on its HTTP server,
its replies dated on the benchmark's clock, its orders pointed at a loopback sshd."""

from __future__ import annotations

from pytest_httpserver import HTTPServer
from werkzeug.serving import WSGIRequestHandler

from tests.fakes.clore_api import FakeClore
from tests.fakes.fake_clock import FakeClock
from tests.fakes.fast_clock import FastClock


def fake_market(http: HTTPServer, clock: FakeClock | FastClock, ssh_port: int) -> FakeClore:
    """Replies' Date header on the fake clock, as the tests' fixture does: the ownership check
    measures the API's clock offset from it."""
    fake = FakeClore(http, clock).install()  # type: ignore[arg-type]  # FastClock reads alike
    WSGIRequestHandler.date_time_string = fake.date_header  # type: ignore[method-assign,assignment]
    fake.ssh_host, fake.ssh_port = "127.0.0.1", ssh_port
    return fake
