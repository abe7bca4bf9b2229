"""The serial rate limiter, driven by a fake clock."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runner.backends.clore.ratelimit import DEFAULT_LIMITER, RateLimiter
from runner.clock import SystemClock
from tests.fakes.fake_clock import FakeClock
from tests.processes import marked_env


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


# --- across processes -----------------------------------------------------------------------


def test_a_second_process_waits_for_the_first_ones_last_call(tmp_path: Path) -> None:
    """The run step and the cleanup step after it are two processes with one key: the second
    one's first call must keep the gap after the first one's last (they made 1-3 HTTP 429s)."""
    clock = FakeClock()
    run_step, cleanup_step = RateLimiter(clock), RateLimiter(clock)  # a limiter each
    for limiter in (run_step, cleanup_step):
        limiter.share_through(tmp_path / "clore-api-last-call")
    with run_step.slot():
        clock.advance(0.3)
    with cleanup_step.slot():
        assert clock.now() == pytest.approx(1.4)  # 0.3 + the 1.1 s gap
    cleanup_step.back_off(10.0)  # a 429 seen by one is waited out by the other
    with run_step.slot():
        assert clock.now() == pytest.approx(11.4)


def test_a_shared_file_that_cannot_be_opened_spaces_own_calls_only(tmp_path: Path) -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    limiter.share_through(tmp_path / "no-such-folder" / "last-call")
    assert starts(limiter, [False, False]) == pytest.approx([0.0, 1.1])


PROCESS = """
import sys, time
from pathlib import Path
from runner.backends.clore.ratelimit import RateLimiter
limiter = RateLimiter(min_interval_s=0.05, create_interval_s=0.05)
limiter.share_through(Path(sys.argv[1]))
with open(sys.argv[2], "a") as out:
    for _ in range(8):
        with limiter.slot():
            began = time.time()
            time.sleep(0.01)  # the request
            out.write(f"{began} {time.time()}\\n")
            out.flush()
"""


@pytest.mark.slow
def test_processes_sharing_the_file_never_overlap_or_crowd(tmp_path: Path) -> None:
    """Two real processes, real clocks: no two calls overlap, and each starts at least the gap
    after the end of the one before (whichever process made it). Without the flock (try it:
    make `_other_processes` yield the fd unlocked) calls overlap and this fails."""
    shared, log = tmp_path / "last-call", tmp_path / "calls.txt"
    procs = [
        subprocess.Popen([sys.executable, "-c", PROCESS, str(shared), str(log)], env=marked_env())
        for _ in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    calls = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(calls) == 16
    for (_, end), (began, _) in itertools.pairwise(calls):
        assert began - end >= 0.05 - 0.002  # the gap, less the clocks' rounding
