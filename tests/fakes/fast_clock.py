"""Real time run faster: for end-to-end runs on the fake Clore whose boots must overlap.

The fake Clore boots an order on its clock and the client spaces its calls on it. `FakeClock`
moves only when slept on, and every sleeper moves it: boots that overlap in time would add
up. This clock is real time `speed` times faster, so sleepers overlap as on the real clock,
and a 25 s boot takes 2.5 real seconds at the default speed.
"""

from __future__ import annotations

import threading
import time

from tests.fakes.fake_clock import START_UNIX

SPEED = 10.0


class FastClock:
    def __init__(self, speed: float = SPEED) -> None:
        self.speed = speed
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    def time(self) -> float:
        return START_UNIX + self.now()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) / self.speed)

    def pause(self, seconds: float, cancel: threading.Event) -> None:
        """A provisioner's pause between polls: cut short by its cancel."""
        cancel.wait(max(0.0, seconds) / self.speed)
