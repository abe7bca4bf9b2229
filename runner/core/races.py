"""The boots racing for one job, pure: a late boot and its hedges (runner/core/hedge.py).

The racers of a job form a ring, each pointing to the next (a pair: each to the other), so
one leaving is one step, and the racers of any of them are a walk round. The boots to look at
for a hedge now are kept here too: a racer left alone by the others' going is hedged at once
if it runs late. Which boot is late, and what to rent beside it, is decided in hedging.py; the
servers themselves are the fleet's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Races:
    """Who races whom for a job, and the boots due a look for a hedge."""

    def __init__(self) -> None:
        self._next: dict[int, int] = {}  # racer -> the next in its ring
        self.to_hedge: list[int] = []  # the boots to look at for a hedge now

    @property
    def pairs(self) -> Mapping[int, int]:
        """Each racer and the next in its ring."""
        return self._next

    def join(self, boot_id: int, hedge_id: int) -> None:
        """`hedge_id` races `boot_id` (and the boots already racing it): into the ring, after
        `boot_id`."""
        self._next[hedge_id] = self._next.get(boot_id, boot_id)
        self._next[boot_id] = hedge_id

    def racing(self, server_id: int) -> list[int]:
        """The boots racing for the job of `server_id`, itself first; alone: itself."""
        ring = [server_id]
        at = self._next.get(server_id)
        while at is not None and at != server_id and at in self._next:
            ring.append(at)
            at = self._next[at]
        return ring

    def leave(self, server_id: int) -> list[int]:
        """`server_id` races no more: the others that raced with it (none: it raced alone)."""
        after = self._next.pop(server_id, None)
        if after is None:
            return []
        ring = self.racing(after)
        if len(ring) == 1:
            self._next.pop(after, None)  # a pair: the other is alone now
        else:
            self._next[ring[-1]] = after  # the one before it points past it
        return ring

    def hedge_soon(self, server_ids: Iterable[int]) -> None:
        """Look at these boots for a hedge in the next decision."""
        self.to_hedge.extend(server_ids)

    def take_to_hedge(self) -> list[int]:
        """The boots to look at for a hedge now, each once; none after this. A boot may be
        named twice (its own timer came due as a racer of it left): one look decides for it,
        and a second would only set its look-again timer twice."""
        due, self.to_hedge = self.to_hedge, []
        return list(dict.fromkeys(due))
