"""Keeps a pool lease alive: a heartbeat every ttl/3 on a thread of its own.

Three beats fit in a ttl, so one slow or failed beat does not lose the lease. A beat that
updates no row means a reaper took the lease: the holder is fenced and `lost` is set, so it
rents nothing more. If no beat has succeeded for a whole ttl (the database unreachable), the
holder must assume the same: a reaper may already be cancelling its servers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError
from runner.stores.pools import Lease
from runner.stores.pools.postgres import PostgresPools


class LeaseKeeper:
    def __init__(
        self,
        pools: PostgresPools,
        lease: Lease,
        *,
        on_lost: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pools = pools
        self.lease = lease
        self.lost = threading.Event()
        self.why = ""
        self._on_lost = on_lost
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.lease.ttl_s)

    def _beat(self) -> None:
        last_ok = self._clock.now()
        while not self._stop.wait(self.lease.ttl_s / 3):
            try:
                if self.pools.heartbeat(self.lease):
                    last_ok = self._clock.now()
                    continue
                why = "its lease was taken over by a reaper"
            except InfrastructureError as exc:
                if self._clock.now() - last_ok < self.lease.ttl_s:
                    continue  # the next beat may get through
                why = f"no heartbeat got through for {self.lease.ttl_s:g} s ({exc})"
            self._lose(why)
            return

    def _lose(self, why: str) -> None:
        self.why = why
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost(why)
