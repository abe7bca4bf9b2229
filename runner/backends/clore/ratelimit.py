"""One serial rate limiter for every Clore API call in the process.

Clore allows about one request per second per API key and one `create_order` per five seconds,
and answers faster traffic with HTTP 429 / code 5. Limiters per client or per thread do not add
up to a limit per key, so the whole process shares one (`DEFAULT_LIMITER`), and it runs calls one
at a time: the lock is held for the whole request, so a call starts only after the previous one
has ended and the gap is counted from that end (latency cannot bunch two calls together).

Time comes from an injected `Clock`, so tests drive it with a fake and never wait real seconds.

Processes share it too once told a file (`share_through`, a file beside the ledger): the run
step and CI's always-run cleanup step back to back went over the key's limit (HTTP 429s). The
file holds the last call's end and any back-off in Unix seconds; each call holds an exclusive
`flock` on it from its wait to its end, so two processes take turns as two threads do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.clock import Clock, SystemClock

SHARED_FILE = "clore-api-last-call"  # beside the ledger: every process using that ledger
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
        self._shared: Path | None = None

    def share_through(self, path: Path) -> None:
        """Space calls with every other process that shares `path` (made if missing)."""
        self._shared = path

    @contextmanager
    def slot(self, *, create: bool = False, abort: threading.Event | None = None) -> Iterator[None]:
        """Hold the API for one request: wait for the gap, run the body, note when it ended.

        `abort` set during the wait gives the slot up (RequestAborted) before anything is sent:
        a create waiting out its 5.5 s must not hold up the cancels of a run being stopped.
        """
        with self._lock, self._other_processes() as shared:
            if shared is not None:
                self._merge(shared)
            self._wait(self.create_interval_s if create else self.min_interval_s, abort)
            try:
                yield
            finally:
                self._last_end = self.clock.now()
                if shared is not None:
                    self._store(shared)

    def back_off(self, seconds: float) -> None:
        """Delay every caller's next request: a 429 is about the key, not about one thread."""
        with self._lock, self._other_processes() as shared:
            if shared is not None:
                self._merge(shared)
            self._not_before = max(self._not_before, self.clock.now() + seconds)
            if shared is not None:
                self._store(shared)

    @contextmanager
    def _other_processes(self) -> Iterator[int | None]:
        """The shared file, locked for this process (None: not shared, or it cannot be
        opened: this process then spaces only its own calls, as before)."""
        if self._shared is None:
            yield None
            return
        try:
            fd = os.open(self._shared, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            yield fd
        finally:
            os.close(fd)

    def _merge(self, fd: int) -> None:
        """Take the other processes' last call and back-off, as times on this clock."""
        try:
            fields = os.pread(fd, 64, 0).decode("ascii").split()
            last_unix, not_before_unix = float(fields[0]), float(fields[1])
        except (OSError, ValueError, IndexError, UnicodeDecodeError):
            return  # empty (new) or unreadable: nothing to add
        to_now = self.clock.now() - self.clock.time()
        last = last_unix + to_now
        self._last_end = last if self._last_end is None else max(self._last_end, last)
        self._not_before = max(self._not_before, not_before_unix + to_now)

    def _store(self, fd: int) -> None:
        to_unix = self.clock.time() - self.clock.now()
        last = (self._last_end if self._last_end is not None else float("-inf")) + to_unix
        not_before = max(self._not_before + to_unix, last)  # -inf is not written as such
        with contextlib.suppress(OSError):
            data = f"{last:.6f} {not_before:.6f}\n".encode("ascii")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)

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
