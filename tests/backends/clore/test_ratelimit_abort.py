"""The limiter gives a slot up when asked to, before anything is sent."""

from __future__ import annotations

import threading

import pytest

from runner.backends.clore.ratelimit import RateLimiter, RequestAborted
from runner.clock import SystemClock
from tests.fakes.fake_clock import FakeClock


@pytest.mark.parametrize("clock", [SystemClock(), FakeClock()], ids=["real", "fake"])
def test_an_aborted_wait_raises_and_runs_nothing(clock: object) -> None:
    limiter = RateLimiter(clock, create_interval_s=30.0)  # type: ignore[arg-type]
    with limiter.slot():
        pass  # a previous call: the next create must wait 30 s
    aborted = threading.Event()
    aborted.set()  # set before: the real clock's wait returns at once
    ran = []
    with pytest.raises(RequestAborted), limiter.slot(create=True, abort=aborted):
        ran.append(True)
    assert ran == []


def test_an_unset_abort_changes_nothing() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    with limiter.slot():
        pass
    with limiter.slot(create=True, abort=threading.Event()):
        pass
    assert clock.slept == [5.5]
