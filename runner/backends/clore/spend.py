"""What a run's rentals cost beyond their attempts' bills: each attempt's share of its server
(bill.share_since), the idle time between jobs, orders that never served a job, and each order
given back with what the API billed for it. The run's total is then what the provider billed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from runner.backends.clore import bill
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.rental import Rental
from runner.clock import Clock


@dataclass(frozen=True)
class GivenOrder:
    """An order given back: its rental, and what it cost where the API said no figure of its
    own (an order given back while booting: what its rent came to; None: not known)."""

    rental: Rental
    fallback_usd: float | None = None

    @property
    def cost_usd(self) -> float | None:
        cost = self.rental.order_cost
        return cost.total_usd if cost is not None else self.fallback_usd


class Spend:
    """The run's money outside its attempts. Thread-safe: rents, releases and attempts end on
    threads of their own."""

    def __init__(self, clock: Clock, provisioner: Provisioner) -> None:
        self.clock = clock
        self.provisioner = provisioner
        self._lock = threading.Lock()
        self._idle_usd = 0.0
        # Each order given back, with what it cost as the API billed it: the attempts' bills
        # hold their shares; these hold the orders'.
        self.given: list[GivenOrder] = []
        # Attempts whose server the shutdown gave back under them: their bills, settled then
        # (rental id -> USD), for their `attempt_done` to hand over.
        self._settled: dict[int, float] = {}

    def idle_usd(self) -> float:
        """What servers held with no job on them cost (and orders that never served one)."""
        with self._lock:
            return self._idle_usd

    def share(self, rental: Rental) -> float:
        """What `rental` cost since its last share, now on its shares. The caller holds the
        rental (one thread at a time bills it)."""
        share = bill.share_since(
            rental.usd_per_hour,
            rental.billed_until,
            self.clock.time(),
            rental.held_since,
            rental.creation_fee_usd,
            rental.fee_billed,
        )
        rental.billed_until, rental.fee_billed = share.billed_until, share.fee_billed
        rental.billed_usd = (rental.billed_usd or 0.0) + share.usd
        return share.usd

    def idle(self, rental: Rental) -> None:
        """The time since `rental`'s last share was nobody's job's: idle."""
        usd = self.share(rental)
        with self._lock:
            self._idle_usd += usd

    def settle_at_shutdown(self, rental: Rental) -> None:
        """The attempt on `rental` outlives its server (a shutdown): its share, settled now,
        waits for its end."""
        usd = self.share(rental)
        with self._lock:
            self._settled[rental.rental_id] = usd

    def settled(self, rental_id: int) -> float | None:
        """The share the shutdown settled for the attempt on `rental_id`, once."""
        with self._lock:
            return self._settled.pop(rental_id, None)

    def give_back_idle(
        self, rentals: list[Rental], within_s: float | None = None
    ) -> dict[int, float | None]:
        """Cancel rentals with no job on them and confirm; each one's final cost, as the API
        billed it (None: not confirmed). What they cost since their last job is idle time,
        billed before the cancel so that it counts even when the API reports no `spend`."""
        idle = {rental.rental_id: self.share(rental) for rental in rentals}
        finals = self.provisioner.release_all(rentals, within_s)
        with self._lock:
            for rental in rentals:
                final = finals.get(rental.rental_id)
                self.given.append(GivenOrder(rental))
                self._idle_usd += idle[rental.rental_id]
                if final is not None:
                    # What the order's final figure adds to the shares billed on our own
                    # clock, or takes back (negative): a preempted spot order stops billing,
                    # an order's `ct` is in whole seconds.
                    self._idle_usd += final - (rental.billed_usd or 0.0)
        return finals

    def wasted(self) -> float:
        """What orders cancelled before they served a job cost: the run's, as idle time."""
        wasted = self.provisioner.take_wasted_usd()
        with self._lock:
            self._idle_usd += wasted
        return wasted

    def boot_given_back(self, rental: Rental, cost_usd: float) -> None:
        """A rent whose order was made and given back before it served a job (a boot that
        failed, a Ctrl-C while it booted) is said at the run's end with the servers it held:
        its job ran on nothing, and the run's total paid for it."""
        with self._lock:
            ids = {g.rental.rental_id for g in self.given}
            if rental.order_id is None or rental.rental_id in ids:
                return  # no order was made, or it was given back as a server held
            self.given.append(GivenOrder(rental, cost_usd))
