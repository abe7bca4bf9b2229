"""`submit --wait --logs` across a lost queue server, against a loopback fake of serve's API
that drops a followed log mid-line and then stops answering: each job's log is picked up again
from the byte it had reached (no line shown twice, none lost, a cut line completed), the wait
says it lost the server and that it answers again, and past its bound it ends with exit 3 and
a hint. What the fake does next is driven by events, never by sleeps."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from runner.cli.boundary import said
from runner.core.model import Job, Pipeline
from runner.errors import InfrastructureError
from runner.serve.client import Client
from runner.serve.wait import Submission, Watch
from tests.fakes.fake_clock import FakeClock

LOG = b"one\ntwo\nthree\nfour\n"
CUT_AT = 6  # the first stream breaks here: after "one\ntw"


class Said(io.StringIO):
    """What the wait prints, with an event set when a line holding `waited_for` is written."""

    def __init__(self, waited_for: str) -> None:
        super().__init__()
        self.waited_for = waited_for
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        if self.waited_for in text:
            self.seen.set()
        return super().write(text)


class FakeServe:
    """GET /jobs/s1.a and its followed log: the first stream sends CUT_AT bytes, then breaks;
    the job is running until the whole log has been sent, then passed."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.offsets: list[int] = []  # where each log request started
        self.sent = 0  # the log's bytes sent, on any stream
        self.down = threading.Event()  # set: every request is answered 503 (serve restarting)
        server.expect_request("/jobs/s1.a/log").respond_with_handler(self.log)
        server.expect_request("/jobs/s1.a").respond_with_handler(self.job)

    def job(self, request: Request) -> Response:
        if self.down.is_set():
            return Response('{"detail": "restarting"}', 503, content_type="application/json")
        status = "passed" if self.sent >= len(LOG) else "running"
        body = {"id": "s1.a", "status": status, "attempt_list": [], "cost_usd": 0.0}
        return Response(_json(body), 200, content_type="application/json")

    def log(self, request: Request) -> Response:
        offset = int(request.args.get("offset", "0"))
        self.offsets.append(offset)
        first = len(self.offsets) == 1

        def body() -> Iterator[bytes]:
            end = CUT_AT if first else len(LOG)
            self.sent = max(self.sent, end)
            yield LOG[offset:end]
            if first:
                raise ConnectionResetError("dropped")  # the connection goes, mid-line

        return Response(body(), 200, content_type="text/plain")


def _json(body: dict[str, Any]) -> str:
    import json  # the fake's replies only

    return json.dumps(body)


def _run_bounded(watch: Watch) -> dict[str, Any]:
    """The wait's result; a wait that never ends (a log never picked up again keeps its job
    running on the fake) fails the test instead of hanging it."""
    result: list[dict[str, Any]] = []
    waiting = threading.Thread(target=lambda: result.append(watch.run()), daemon=True)
    waiting.start()
    waiting.join(60)
    watch.interrupt("the test gave up")
    assert result, "the wait never ended"
    return result[0]


def submission() -> Submission:
    job = Job(id="a", name="a", run="true")
    return Submission(1, Pipeline(name="p", jobs=(job,)), {"a": "s1.a"}, 0.0)


@pytest.fixture
def fake(httpserver: HTTPServer) -> FakeServe:
    return FakeServe(httpserver)


def test_a_cut_log_is_picked_up_where_it_was_no_line_twice_none_lost(fake: FakeServe) -> None:
    out = Said("never")
    watch = Watch(Client(fake.server.url_for("")), submission(), out, logs=True, poll_s=0.01)
    jobs = _run_bounded(watch)
    assert jobs["a"]["status"] == "passed", out.getvalue()
    lines = out.getvalue().splitlines()
    shown = [line for line in lines if line.startswith("[a] ") and "log " not in line]
    assert shown == ["[a] one", "[a] two", "[a] three", "[a] four"], lines
    assert fake.offsets == [0, CUT_AT]  # the second stream began where the first broke
    cut = [line for line in lines if "log cut off" in line]
    assert len(cut) == 1 and "[a] log picked up again at byte 6" in lines


def test_a_server_that_stays_away_ends_the_wait_with_exit_3_and_a_hint(
    fake: FakeServe,
) -> None:
    clock = FakeClock()
    out = Said("lost the server")
    fake.down.set()  # serve went away before the first look
    watch = Watch(
        Client(fake.server.url_for("")), submission(), out, clock=clock, poll_s=0.01, lost_s=60
    )
    failed: list[InfrastructureError] = []

    def wait() -> None:
        try:
            watch.run()
        except InfrastructureError as exc:
            failed.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    assert out.seen.wait(30), out.getvalue()
    clock.advance(61)  # past the bound, as the wait's clock sees it
    waiting.join(30)
    assert not waiting.is_alive()
    (exc,) = failed
    assert exc.exit_code == 3
    text = said(exc)
    assert text.startswith("clore-run: ") and "for 60 s: stopped waiting" in text
    assert "\nhint: the jobs go on there: `clore-run status s1.<job>`" in text
    assert "lost the server" in out.getvalue() and "answers again" not in out.getvalue()


def test_a_server_back_within_the_bound_is_followed_again(fake: FakeServe) -> None:
    out = Said("lost the server")
    fake.down.set()
    watch = Watch(Client(fake.server.url_for("")), submission(), out, logs=True, poll_s=0.01)
    threading.Thread(target=lambda: (out.seen.wait(30), fake.down.clear())).start()
    jobs = _run_bounded(watch)  # serve comes back once the wait said it lost it
    said_ = out.getvalue()
    assert jobs["a"]["status"] == "passed", said_
    assert "the server answers again" in said_
    assert said_.index("lost the server") < said_.index("the server answers again")
    shown = [line for line in said_.splitlines() if line.startswith("[a] ") and "log " not in line]
    assert shown == ["[a] one", "[a] two", "[a] three", "[a] four"]
