"""Wrong dashboard logins slow their address down.

The login form takes the API token, so a client guessing it must not get far: 300 wrong tries
at 85 a second went through unslowed. After `free` wrong tries an address waits before its
next one is even checked, twice as long after each further wrong one (capped); a right one
clears it. Kept in memory, per instance: a restart or another instance gives a guesser a few
more free tries, not a faster rate. Addresses are counted as the connection limits count them
(an IPv6 /64 is one), and the table is bounded: the address idle longest goes first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from runner.clock import Clock

FREE_TRIES = 5
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 300.0
FORGET_AFTER_S = 3600.0  # an address with no wrong try for this long starts afresh
MAX_ADDRESSES = 10_000


@dataclass
class _Record:
    wrong: int
    last: float  # clock.now() of its last wrong try
    until: float  # clock.now() before which its next try is not checked


class LoginThrottle:
    """Per address: may it try now, and what a wrong or right try does. Thread-safe."""

    def __init__(self, clock: Clock, free: int = FREE_TRIES, max_wait_s: float = MAX_WAIT_S):
        self._clock = clock
        self._free = free
        self._max_wait_s = max_wait_s
        self._records: dict[str, _Record] = {}  # least recently wrong first
        self._lock = threading.Lock()

    def wait_s(self, address: str) -> float:
        """Seconds before `address` may try again (0: now)."""
        now = self._clock.now()
        with self._lock:
            record = self._records.get(address)
            if record is None:
                return 0.0
            if now - record.last > FORGET_AFTER_S:
                del self._records[address]
                return 0.0
            return max(0.0, record.until - now)

    def wrong(self, address: str) -> float:
        """A wrong token from `address`; the wait its next try has."""
        now = self._clock.now()
        with self._lock:
            record = self._records.pop(address, None) or _Record(0, now, now)
            record.wrong += 1
            record.last = now
            over = record.wrong - self._free
            wait_s = 0.0 if over < 0 else min(self._max_wait_s, FIRST_WAIT_S * 2.0**over)
            record.until = now + wait_s
            self._records[address] = record  # now the most recent
            while len(self._records) > MAX_ADDRESSES:
                del self._records[next(iter(self._records))]
            return wait_s

    def right(self, address: str) -> None:
        with self._lock:
            self._records.pop(address, None)
