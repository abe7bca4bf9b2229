"""A run's (or serve instance's) seat in a budget pool: its lease, kept alive, and the
reservation behind each rental it makes.

The rental order is: reserve (money and a server) -> ledger intent -> tie the reservation to the
ledger row -> create. Tied before the create, a reservation with no rental row made nothing, so
a reaper settles it at $0; one with a row is settled at what that rental was billed.
A pool that is full makes the renter wait (others give servers back); one that can never fit
the rental refuses it, as an own budget does.

A `serve` instance on a shared queue claims each job together with a server slot (a $0
reservation, runner/stores/queue/postgres.py); the seat keeps which slot is whose. The job's rental
reservation takes its slot over (the server counted once), and a job placed on a kept server
gives its slot back, since it needs no new server.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError, JobCannotRun
from runner.stores.pools import LeaseLost, Refusal, Reservation
from runner.stores.pools.lease_keeper import LeaseKeeper
from runner.stores.pools.postgres import PostgresPools

DEFAULT_TTL_S = 60.0
MAX_WAIT_S = 1800.0  # for a full pool to free a slot, then the job gives up


class PoolCancelled(InfrastructureError):
    """The attempt was cancelled while it waited for room in the pool."""


@dataclass
class PoolSeat:
    pools: PostgresPools
    pool: str
    holder: str
    ttl_s: float = DEFAULT_TTL_S
    max_wait_s: float = MAX_WAIT_S
    clock: Clock = SYSTEM_CLOCK
    owned: bool = True  # False: what the lease holds outlives this process (postgres.join)
    keeper: LeaseKeeper = field(init=False)
    _slots: dict[str, int] = field(default_factory=dict, init=False)  # job id -> its claim's
    _slots_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        lease = self.pools.join(self.pool, self.holder, self.ttl_s, owned=self.owned)
        self.keeper = LeaseKeeper(self.pools, lease, clock=self.clock).start()

    @property
    def lease_lost(self) -> bool:
        return self.keeper.lost.is_set()

    def reserve(
        self,
        amount_usd: float,
        label: str,
        cancel: threading.Event,
        make_room: Callable[[], bool] = lambda: False,
        job_id: str | None = None,
    ) -> Reservation:
        """Reserve the worst case of one rental, waiting while the pool is full.
        `make_room()` gives back one of the holder's own idle servers (True if it did): a run
        must not wait for a slot that its own idle server takes. The slot `job_id`'s claim
        holds, if any, becomes this rental's server."""
        deadline = self.clock.now() + self.max_wait_s
        pause = 0.5
        slot = self._take_slot(job_id)
        while True:
            self._check_lease()
            made = self.pools.reserve(self.keeper.lease, amount_usd, label, slot=slot)
            if isinstance(made, Reservation):
                return made
            if made.ever or self.clock.now() >= deadline:
                raise JobCannotRun(self._refused(made))
            if make_room():
                continue
            if cancel.wait(pause):
                raise PoolCancelled(f"cancelled while waiting for room in pool {self.pool}")
            pause = min(pause * 1.5, 10.0)

    def grow(self, reservation: Reservation, extra_usd: float, job_id: str | None = None) -> bool:
        """Cover one more job on a kept server; False if the pool cannot. The job's claim
        slot, if it holds one, goes back: the kept server is counted already."""
        self._check_lease()
        if self.pools.grow(self.keeper.lease, reservation.id, extra_usd) is not None:
            return False
        slot = self._take_slot(job_id)
        if slot is not None:
            with contextlib.suppress(InfrastructureError):  # the job's end gives it back too
                self.pools.release_slots([slot], f"{self.holder}: on a kept server")
        return True

    def hold_slots(self, slots: Mapping[str, int]) -> None:
        """The server slots a claim took, by job id."""
        with self._slots_lock:
            self._slots.update(slots)

    def _take_slot(self, job_id: str | None) -> int | None:
        with self._slots_lock:
            return None if job_id is None else self._slots.pop(job_id, None)

    def attach(self, reservation: Reservation, rental_id: int) -> None:
        self.pools.attach(self.keeper.lease, reservation.id, rental_id)

    def settle(self, reservation: Reservation, billed_usd: float) -> None:
        """Record what the rental was billed. A fenced holder's settle is refused: the reaper
        that took its lease settles instead (LeaseLost is not raised from here, since this runs
        on the give-back path, which must go on)."""
        with contextlib.suppress(InfrastructureError):  # LeaseLost included
            self.pools.settle(self.keeper.lease, reservation.id, max(0.0, billed_usd))

    def close(self) -> None:
        """Stop heartbeating and leave: what is still unsettled goes to a reaper at once."""
        self.keeper.stop()
        if not self.lease_lost:
            # If this fails the lease expires on its own, and a reaper settles what is left.
            with contextlib.suppress(InfrastructureError):
                self.pools.leave(self.keeper.lease)
        self.pools.close()

    def _check_lease(self) -> None:
        if self.lease_lost:
            raise LeaseLost(
                f"run {self.holder} lost its lease on pool {self.pool}: {self.keeper.why}",
                hint="it stopped renting; a reaper is settling what it held",
            )

    def _refused(self, refusal: Refusal) -> str:
        if refusal.ever:
            return refusal.why
        return f"{refusal.why}, for {self.max_wait_s / 60:.0f} minutes"
