"""The one clock type. Whatever reads the time or waits is handed a `Clock`, so tests drive time
with a fake and never wait real seconds."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Unix seconds: timestamps, timers, reports, and the API's own times (an order's `ct`)."""
        ...

    def now(self) -> float:
        """Monotonic seconds, for spacing calls and measuring intervals."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
