"""The tests' clock: time moves only when the code under test sleeps or the test moves it, so
nothing waits real seconds and every reading is known."""

from __future__ import annotations

import threading

START_UNIX = 1_783_700_000.0  # July 2026, when the Clore reference's live captures were taken


class FakeClock:
    """A `runner.clock.Clock` that moves only when slept on, advanced or set. Thread-safe.

    `now()` (monotonic) counts from 0 at `start_unix`; `time()` is `start_unix` plus it.
    `slept` lists every sleep the code asked for, in order."""

    def __init__(self, start_unix: float = START_UNIX) -> None:
        self._t = 0.0
        self._start_unix = start_unix
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._t

    def time(self) -> float:
        return self._start_unix + self.now()

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self._t += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds

    @property
    def unix(self) -> float:
        """`time()`, as a value a test can also set (`clock.unix += 60`) to jump to a moment."""
        return self.time()

    @unix.setter
    def unix(self, value: float) -> None:
        with self._lock:
            self._t = value - self._start_unix
