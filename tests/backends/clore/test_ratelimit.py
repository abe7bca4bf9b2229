"""The serial rate limiter, driven by a fake clock."""

from __future__ import annotations

import itertools
import threading

import pytest

from runner.backends.clore.ratelimit import DEFAULT_LIMITER, RateLimiter
from runner.clock import SystemClock
from tests.fakes.clore_api import FakeClock


def starts(limiter: RateLimiter, kinds: list[bool]) -> list[float]:
    times = []
    for create in kinds:
        with limiter.slot(create=create):
            times.append(limiter.clock.now())
    return times


def test_calls_are_spaced_and_creates_wait_longer() -> None:
    clock = FakeClock()
    times = starts(RateLimiter(clock), [False, False, True, False, True])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[0] == 0.0  # the first call does not wait
    assert gaps == pytest.approx([1.1, 5.5, 1.1, 5.5])


def test_the_gap_counts_from_the_end_of_the_previous_call() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    with limiter.slot():
        clock.advance(3.0)  # a slow reply
    with limiter.slot():
        assert clock.now() == pytest.approx(4.1)


def test_no_wait_when_enough_time_passed() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    starts(limiter, [False])
    clock.advance(10.0)
    starts(limiter, [True])
    assert clock.slept == []


def test_back_off_delays_every_caller() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    starts(limiter, [False])
    limiter.back_off(7.0)
    assert starts(limiter, [False]) == pytest.approx([7.0])


def test_threads_are_serialised() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    inside = 0
    overlaps: list[int] = []
    times: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        nonlocal inside
        for _ in range(5):
            with limiter.slot():
                with lock:
                    inside += 1
                    overlaps.append(inside)
                    times.append(clock.now())
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlaps) == 1
    times.sort()
    assert all(b - a >= 1.1 - 1e-9 for a, b in itertools.pairwise(times))


def test_default_is_one_process_wide_limiter_on_the_real_clock() -> None:
    assert isinstance(DEFAULT_LIMITER.clock, SystemClock)
    assert (DEFAULT_LIMITER.min_interval_s, DEFAULT_LIMITER.create_interval_s) == (1.1, 5.5)
