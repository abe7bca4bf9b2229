"""Giving orders back: every cancel sent first, then confirmed together, each order's final
cost settled from what the API billed. Never raises: what stays unconfirmed stays in the
ledger as `releasing`, for `clore-run cleanup`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from runner.backends.clore import bill
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.models import Order
from runner.backends.clore.ratelimit import RequestAborted
from runner.backends.clore.rental import ProvisionOptions, Rental
from runner.clock import Clock
from runner.stores.ledger import LedgerError, RentalLedger, State
from runner.stores.pools import Reservation


class Releaser:
    """Cancels and confirms orders through `client`, marking the ledger as it goes.

    `hurry` set (a signal stopped the run) cuts the confirming short; `cancels` guards each
    rental's one cancel, sent by whoever knows the order first; `settle_pool` hears what
    each order given back cost its pool reservation."""

    def __init__(
        self,
        client: CloreClient,
        ledger: RentalLedger,
        clock: Clock,
        options: ProvisionOptions,
        hurry: threading.Event,
        cancels: threading.Lock,
        settle_pool: Callable[[Reservation | None, float], None],
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.clock = clock
        self.options = options
        self.hurry = hurry
        self._cancels = cancels
        self._settle_pool = settle_pool

    def release_all(
        self, rentals: list[Rental], within_s: float | None = None
    ) -> dict[int, float | None]:
        """Cancel every order first, then confirm them together: with one API call a second,
        a shutdown that confirmed each order in turn would not end within GitHub's 7.5 s.
        An order can stay listed a few seconds after its cancel, so the check is repeated with
        backoff for `within_s` (default `confirm_within_s`) before it counts as unconfirmed.
        Each rental's final cost, in its parts, lands on it (`order_cost`)."""
        finals: dict[int, float | None] = {}
        waiting: dict[int, Rental] = {}
        for rental in rentals:
            if rental.conn is not None:
                rental.conn.close()
            finals[rental.rental_id] = None
            if rental.order_id is not None:
                self.note(rental, "releasing")
                waiting[rental.order_id] = rental
        unsent = {order_id for order_id, rental in waiting.items() if not self.cancel(rental)}
        window_s = self.options.confirm_within_s if within_s is None else within_s
        deadline = self.clock.now() + window_s
        pause_s = self.options.first_confirm_pause_s
        while waiting:
            for order_id, gone, order in self._check(list(waiting)):
                rental = waiting[order_id]
                spend = self._ended_spend(rental, order) if gone else None
                if spend is None and order is not None:
                    spend = order.spend
                if spend is not None:
                    finals[rental.rental_id] = self._settle(rental, spend)
                if gone:
                    self.note(rental, "released")
                    self._settle_pool(rental.reservation, self._final_usd(rental, finals))
                    del waiting[order_id]
            if not waiting or self.clock.now() + pause_s > deadline or self.hurry.is_set():
                break
            self.options.pause(pause_s, self.hurry)
            pause_s = min(pause_s * 2, 8.0)
            unsent = {i for i in unsent if i in waiting and not self.cancel(waiting[i])}
        return finals

    def _final_usd(self, rental: Rental, finals: dict[int, float | None]) -> float:
        final = finals.get(rental.rental_id)
        if final is not None:
            return final
        return rental.estimated_cost(self.clock.time()).total_usd  # no `spend`: our estimate

    def _settle(self, rental: Rental, spend_native: float) -> float:
        rental.order_cost = rental.billed_cost(spend_native, self.clock.time())
        return rental.order_cost.total_usd

    def note(self, rental: Rental, state: State) -> None:
        """A ledger write while giving back: a failing ledger must not stop the cancels (the
        row stays open, and `clore-run cleanup` finds the order ended)."""
        with contextlib.suppress(LedgerError):
            self.ledger.set_state(rental.rental_id, state)

    def cancel(self, rental: Rental) -> bool:
        """Send the cancel, once; False when it failed (it is sent again while confirming).
        Already ended, or a hiccup: the my_orders check decides."""
        assert rental.order_id is not None
        with self._cancels:
            if rental.cancel_sent:
                return True
            rental.cancel_sent = True  # taken: another thread does not send it too
            if rental.cancelled_at is None:
                rental.cancelled_at = self.clock.time()  # billing stops about now
        try:
            self.client.cancel_order(rental.order_id, abort=self.hurry)
        except (api_errors.CloreApiError, RequestAborted):
            with self._cancels:
                rental.cancel_sent = False
            return False
        return True

    def _check(self, order_ids: list[int]) -> list[tuple[int, bool, Order | None]]:
        """(order id, gone?, the order as listed) for each, from one my_orders call."""
        try:
            orders = {o.id: o for o in self.client.my_orders(return_completed=True)}
        except api_errors.CloreApiError:
            return []
        out: list[tuple[int, bool, Order | None]] = []
        for order_id in order_ids:
            order = orders.get(order_id)
            out.append((order_id, order is None or bool(order.expired), order))
        return out

    def _ended_spend(self, rental: Rental, order: Order | None) -> float | None:
        """What an ended order billed at its listed price (native), up to its own end; its
        lifetime by the API's stamps is kept on the rental (the creation fee hangs on it)."""
        if order is None:
            return None
        price = order.price or rental.price_per_day
        start = min(order.ct, rental.held_since) if order.ct is not None else None
        lived_s = bill.ended_lived_s(start, order.order_end, order.spend, price)
        if order.order_end is not None and lived_s is not None:
            rental.ended_lived_s = lived_s
        return bill.ended_spend_native(order.spend, price, lived_s, rental.spot)
