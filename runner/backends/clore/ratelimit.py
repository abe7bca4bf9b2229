"""One serial rate limiter for every Clore API call in the process.

Clore allows about one request per second per API key and one `create_order` per five seconds,
and answers faster traffic with HTTP 429 / code 5. Limiters per client or per thread do not add
up to a limit per key, so the whole process shares one (`DEFAULT_LIMITER`), and it runs calls one
at a time: the lock is held for the whole request, so a call starts only after the previous one
has ended and the gap is counted from that end (latency cannot bunch two calls together).

Time comes from an injected `Clock`, so tests drive it with a fake and never wait real seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from runner.clock import Clock, SystemClock

MIN_INTERVAL_S = 1.1  # the official cookbook's spacing; the API allows 1 request/s
CREATE_INTERVAL_S = 5.5  # create_order allows 1 request/5 s; 0.5 s of margin as G-gv found


class RequestAborted(Exception):
    """A request given up before it was sent (nothing reached the API)."""


class RateLimiter:
    """Serialises calls: ≥ `min_interval_s` after any call, ≥ `create_interval_s` before a create.

    The create gap counts from the end of the previous call of any kind, which is stricter than
    "one create per 5 s" and also covers the burst (wallets, marketplace, create) that still hit
    code 5 in G-gv's client.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        create_interval_s: float = CREATE_INTERVAL_S,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.min_interval_s = min_interval_s
        self.create_interval_s = create_interval_s
        self._lock = threading.Lock()
        self._last_end: float | None = None
        self._not_before = float("-inf")  # pushed out by `back_off` after a 429

    @contextmanager
    def slot(self, *, create: bool = False, abort: threading.Event | None = None) -> Iterator[None]:
        """Hold the API for one request: wait for the gap, run the body, note when it ended.

        `abort` set during the wait gives the slot up (RequestAborted) before anything is sent:
        a create waiting out its 5.5 s must not hold up the cancels of a run being stopped.
        """
        with self._lock:
            self._wait(self.create_interval_s if create else self.min_interval_s, abort)
            try:
                yield
            finally:
                self._last_end = self.clock.now()

    def back_off(self, seconds: float) -> None:
        """Delay every caller's next request: a 429 is about the key, not about one thread."""
        with self._lock:
            self._not_before = max(self._not_before, self.clock.now() + seconds)

    def _wait(self, gap_s: float, abort: threading.Event | None) -> None:
        ready_at = self._not_before
        if self._last_end is not None:
            ready_at = max(ready_at, self._last_end + gap_s)
        delay = ready_at - self.clock.now()
        if delay > 0:
            if abort is not None and isinstance(self.clock, SystemClock):
                abort.wait(delay)  # real time: wake at once when aborted
            else:
                self.clock.sleep(delay)
        if abort is not None and abort.is_set():
            raise RequestAborted("gave up waiting for the API: the request was cancelled")


DEFAULT_LIMITER = RateLimiter()
"""The process-wide limiter that clients use unless they are handed another one."""
