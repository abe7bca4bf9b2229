"""Renting one server: `create_order`, which is never retried blindly.

The API's reply to a create carries no order id and a create is not idempotent, so the order is
found in `my_orders` instead, proven ours by its tag (see ownership). After an ambiguous failure
(code 1, a non-JSON reply, a timeout, a dropped connection) the order may exist: it is looked for
there before anything else is decided.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from runner.backends.clore import errors as e
from runner.backends.clore.models import Order
from runner.backends.clore.order_request import OrderRequest
from runner.backends.clore.ownership import (
    Claim,
    CreateJournal,
    Verdict,
    after_success,
    find_ours,
    tagged_late,
)
from runner.backends.clore.transport import Transport

log = logging.getLogger(__name__)

Found = tuple[Order | None, Verdict | None]


@dataclass(frozen=True)
class CreatePacing:
    """How long a create's order is looked for, and how a rate-limited create is repeated."""

    recover_delays_s: tuple[float, ...]  # after the create: my_orders lags it
    follow_up_delays_s: tuple[float, ...]  # an accepted create's order still not proven ours
    rate_limit_retries: int  # creates refused with code 5 are sent again this many times
    rate_limit_wait_s: float  # beyond the limiter's own create gap, times the try's number


def may_have_created(exc: e.CloreApiError) -> bool:
    """Failures after which the order may exist. Codes 2-6 are refusals: nothing was created."""
    ambiguous = (e.DatabaseError, e.NonJsonReplyError, e.TransportError, e.UnknownCodeError)
    return isinstance(exc, ambiguous)


class OrderCreation:
    """Creates orders through `transport`, looking for them with `my_orders`."""

    def __init__(
        self, transport: Transport, my_orders: Callable[[], list[Order]], pacing: CreatePacing
    ) -> None:
        self._transport = transport
        self._my_orders = my_orders
        self.pacing = pacing

    def create(
        self,
        request: OrderRequest,
        abort: threading.Event | None,
        journal: CreateJournal | None,
        taken: Collection[int],
    ) -> Order:
        """The order this create made (see `CloreClient.create_order`)."""
        sent: list[float] = []

        def mark_sent() -> None:
            # The last send is the one that may have made an order: a send refused for the
            # rate limit made nothing. Its time opens the ownership window and starts the bill
            # where `ct` stamps late (from the first, a refused send's wait was billed too).
            sent.append(self._transport.limiter.clock.time())
            if journal is not None:
                journal.sent(sent[-1], self._transport.clock_offset.current(), request.tag)

        try:
            self._send(request, abort, mark_sent)
        except e.CloreApiError as exc:
            if not sent:
                raise
            claim = self._claim(request, sent[-1], journal)
            if not may_have_created(exc):
                raise
            return self._after_failure(request, claim, taken, exc)
        claim = self._claim(request, sent[-1], journal, accepted=True)
        order, verdict = self._recover(claim, taken, cause=None)
        if order is None:
            order, verdict = self._follow_up(claim, taken)
        if order is None:
            raise self._accepted_unproven(request, verdict)
        return order

    def _after_failure(
        self, request: OrderRequest, claim: Claim, taken: Collection[int], exc: e.CloreApiError
    ) -> Order:
        """An ambiguous failure: the order this create made after all, or the failure."""
        order, verdict = self._recover(claim, taken, cause=exc)
        if order is None and verdict is not None and verdict.maybe:
            maybe = tuple(o.id for o in verdict.maybe)
            raise e.OrderOutcomeUnknownError(
                f"create_order on server {request.server_id} failed ({exc.message}), and "
                f"order {', '.join(map(str, maybe))} on it may be ours: none was proven",
                server_id=request.server_id,
                endpoint="create_order",
                hint="`clore-run cleanup --cancel-unproven` cancels it when no other run "
                "uses this API key",
                maybe_ours=maybe,
                why=verdict.describe(),
            ) from exc
        if order is None:
            exc.message += (
                f"; no order for server {request.server_id} appeared in my_orders "
                f"within {sum(self.pacing.recover_delays_s):.0f} s that is provably ours, so it "
                "was most likely not created"
            )
            raise exc
        log.warning(
            "create_order on server %s answered %s, yet order %s exists: using it",
            request.server_id,
            type(exc).__name__,
            order.id,
        )
        return order

    def _accepted_unproven(
        self, request: OrderRequest, verdict: Verdict | None
    ) -> e.OrderOutcomeUnknownError:
        maybe = tuple(o.id for o in verdict.maybe) if verdict is not None else ()
        seen = f" (maybe ours: order {', '.join(map(str, maybe))})" if maybe else ""
        waited = sum(self.pacing.recover_delays_s) + sum(self.pacing.follow_up_delays_s)
        return e.OrderOutcomeUnknownError(
            f"create_order on server {request.server_id} was accepted, but no order on it "
            f"was proven ours in my_orders within {waited:.0f} s{seen}",
            server_id=request.server_id,
            endpoint="create_order",
            hint="a billed server exists: `clore-run cleanup --cancel-unproven` cancels it "
            "when no other run uses this API key",
            accepted=True,
            maybe_ours=maybe,
            why=verdict.describe() if verdict is not None else "",
        )

    def _follow_up(self, claim: Claim, taken: Collection[int]) -> Found:
        """An accepted create's order not proven ours yet: look longer, backing off, saying so
        (the API may list it late, or stamp it late). A read failing here ends nothing."""
        delays_s = self.pacing.follow_up_delays_s
        if not delays_s:
            return None, None
        log.warning(
            "server %s: the create was accepted, its order is not proven ours yet: still "
            "looking for up to %.0f s",
            claim.server_id,
            sum(delays_s),
        )
        try:
            return self._recover(claim, taken, cause=None, delays_s=delays_s)
        except e.OrderOutcomeUnknownError:  # my_orders unreadable to the end: still unproven
            return None, None

    def _claim(
        self,
        request: OrderRequest,
        sent_unix_s: float,
        journal: CreateJournal | None,
        accepted: bool = False,
    ) -> Claim:
        """What this create can be known by, now that it was answered (or failed)."""
        answered = self._transport.limiter.clock.time()
        if journal is not None:
            journal.answered(answered, accepted)
        return Claim(
            server_id=request.server_id,
            sent_unix_s=sent_unix_s,
            answered_unix_s=answered,
            offset=self._transport.clock_offset.current(),
            tag=request.tag,
            image=request.image,
            currency=request.currency,
            spot=request.spot_price_per_day is not None,
            spot_price_per_day=request.spot_price_per_day,
        )

    def _send(
        self,
        request: OrderRequest,
        abort: threading.Event | None,
        before_send: Callable[[], None],
    ) -> None:
        """Send the create; a refusal for the rate limit (HTTP 429 / code 5) rented nothing, so
        it is sent again to the same server after a wait that every caller shares, a bounded
        number of times. Any other failure is the caller's to judge. `before_send` runs before
        each send (the last one's time opens the ownership window)."""
        retries = self.pacing.rate_limit_retries
        for attempt in range(retries + 1):
            try:
                self._transport.call(
                    "POST",
                    "create_order",
                    body=request.body(),
                    create=True,
                    abort=abort,
                    before_send=before_send,
                )
                return
            except e.RateLimitedError as exc:
                if attempt == retries:
                    raise
                wait_s = self.pacing.rate_limit_wait_s * (attempt + 1)
                wait_s = max(wait_s, exc.retry_after_s or 0.0)
                log.info("create_order refused by the rate limit; again in %.0f s", wait_s)
                self._transport.limiter.back_off(wait_s)

    def _recover(
        self,
        claim: Claim,
        taken: Collection[int],
        cause: e.CloreApiError | None,
        delays_s: Sequence[float] | None = None,
    ) -> Found:
        """Wait with backoff for this create's order to show in my_orders: the order, or None
        and the last look's verdict. A read that fails (after its own retries) does not end
        the search: the order may well exist, and giving up on it would leave it booting,
        billed, for `cleanup`."""
        failed: e.CloreApiError | None = None
        verdict: Verdict | None = None
        for delay in self.pacing.recover_delays_s if delays_s is None else delays_s:
            self._transport.limiter.clock.sleep(delay)
            try:
                orders = self._my_orders()
            except e.CloreApiError as exc:
                failed = exc
                continue
            failed = None
            verdict = find_ours(orders, claim, taken)
            if verdict.order is not None and not verdict.order.expired:
                return verdict.order, verdict
            if cause is None:  # our create succeeded: the tag may just not be listed yet
                found = after_success(orders, claim, taken)
            else:  # it failed: our tag alone, on an order stamped late
                found = tagged_late(orders, claim, taken)
            if found is not None:
                return found, verdict
            if verdict.not_ours:
                log.info("server %s: not our order: %s", claim.server_id, verdict.describe())
        if failed is not None:
            raise e.OrderOutcomeUnknownError(
                f"could not check my_orders after create_order on server "
                f"{claim.server_id}: {failed.message}",
                server_id=claim.server_id,
                endpoint="create_order",
                hint="a billed server may exist: run `clore-run cleanup`",
                accepted=cause is None,
            ) from (cause or failed)
        return None, verdict
