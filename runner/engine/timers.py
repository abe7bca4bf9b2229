"""The loop's timers: tokens due at times on the injected clock, earliest first."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Timers(Generic[T]):
    """Tokens by the time they are due; two due at once come out in the order they were set."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()  # ties broken by order set: tokens are never compared

    def set(self, at: float, token: T) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), token))

    def next_at(self) -> float | None:
        """When the earliest is due; None with no timer set."""
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> Iterator[T]:
        """Take out, earliest first, each token due at `now` (one set meanwhile included)."""
        while self._heap and self._heap[0][0] <= now:
            yield heapq.heappop(self._heap)[2]
