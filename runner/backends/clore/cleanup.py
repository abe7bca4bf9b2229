"""Reconcile the ledger with `my_orders`: cancel whatever a run left behind, the last layer
of never leaving a billed server running.

For every rental not yet released, the order is looked up in `my_orders` (completed ones
included, so "ended" and "never created" can be told apart):
- by its order id when the ledger has one;
- otherwise (the run died between `create_order` and learning the id, or the create failed
  ambiguously: HTTP 500 / code 1, no reply) by the tag its create carried: an intent whose
  create was never sent made nothing; a sent one adopts only the order on its server that
  echoes its tag, nothing else ruling it out and no other rental holding it (see ownership).
  An order that cannot be proven ours is never cancelled: it is listed with the reason, and the
  rental stays open when an order might still be ours (`unproven`).
A rental whose create the API refused (code 6 server-already-rented, too_low_price, ...) is
`failed` and not looked at: a refusal made nothing, and an order made around it is another
run's (two runs racing for one host: the loser's cleanup must leave the winner's order alone).
A live order is cancelled, then confirmed gone from `my_orders` (the API can answer OK and keep
listing it: it is cancelled once more, then looked at again). Only then is the rental `released`.
An order that already ended is `released` at once; an intent with no order is `failed`, but only
once it is old enough that `my_orders` (which lags `create_order`) would show its order.

All waiting goes through the client's rate limiter, whose clock tests replace. An API error on one
rental is reported and the others go on; the rental stays unreleased for the next run.
Idempotent: with nothing unreleased it makes no API call at all.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from runner.backends.clore import bill
from runner.backends.clore.api import CloreClient
from runner.backends.clore.ended import ended_cost_usd
from runner.backends.clore.errors import CloreApiError
from runner.backends.clore.models import Order
from runner.backends.clore.ownership import (
    ACCEPTED,
    Claim,
    Verdict,
    after_success,
    find_ours,
    order_of,
    record_order,
)
from runner.clock import Clock
from runner.core.money import usd_text
from runner.stores.ledger import Rental, RentalLedger

CONFIRM_WAIT_S = 5.0  # before the last look after a second cancel (G-gv waited 2-12 s)

Kind = Literal["cancelled", "ended", "nothing-created", "unproven", "error"]

_DONE_TEXT: dict[Kind, tuple[str, str]] = {  # (done, dry run)
    "cancelled": ("cancelled; marked released", "would cancel"),
    "ended": ("already ended; marked released", "already ended; would mark released"),
    "nothing-created": ("no order was created; marked failed", "no order; would mark failed"),
    "unproven": ("no order is provably ours: nothing cancelled", "no order is provably ours"),
    "error": ("error", "error"),
}


@dataclass(frozen=True)
class Action:
    """What reconcile did (or, in a dry run, would do) for one rental."""

    rental: Rental
    kind: Kind
    order_id: int | None
    detail: str = ""
    dry_run: bool = False
    hint: str = ""  # what to do about an error the API explained (a refused key, no network)

    @property
    def resolved(self) -> bool:
        """False when the rental is still unreleased and may still be billed."""
        return self.kind not in ("error", "unproven")

    def describe(self, with_hint: bool = True) -> str:
        """`released: ...`; `with_hint` False leaves the hint to whoever says it once."""
        text = _DONE_TEXT[self.kind][1 if self.dry_run else 0]
        said = f"{text}: {self.detail}" if self.detail else text
        return f"{said} ({self.hint})" if self.hint and with_hint else said


def reconcile(
    ledger: RentalLedger,
    client: CloreClient,
    *,
    dry_run: bool,
    run_id: str | None = None,
    clock: Clock | None = None,
    settle_s: float | None = None,
    skip_runs: Collection[str] = (),
    cancel_unproven: bool = False,
) -> list[Action]:
    """Release every unreleased rental (of `run_id`, or all) and say what was done, in ledger
    order. `settle_s` (default: the client's own wait for a new order) is how old an intent must
    be before the absence of its order from `my_orders` means it made none. The rentals of
    `skip_runs` (runs still running) are left alone; their orders stay theirs.
    `cancel_unproven`: a person said no other run uses this key, so the orders that may be a
    rental's, none proven, are cancelled too (each verdict says so); without it they are
    named and the rental kept open. Every verdict and its reason is kept in the ledger."""
    clock = clock or client.limiter.clock
    pending = [r for r in ledger.unreleased(run_id) if r.run_id not in skip_runs]
    if not pending:
        return []
    settle = sum(client.recover_delays_s) if settle_s is None else settle_s
    # Orders other unreleased rentals (any run) hold are theirs, not candidates for an intent.
    owned = {order for r in ledger.unreleased() if (order := order_of(r)) is not None}
    accepted = {r.id for r in pending if r.order_id is None and _was_accepted(ledger, r)}
    try:
        found = _look_up(client, pending, owned, clock, settle, accepted)
    except CloreApiError as exc:
        listing = f"could not list orders: {exc.message}"
        return [_error(r, order_of(r), listing, exc.hint) for r in pending]
    if dry_run:
        return [_verdict(r, found[r.id], dry_run=True) for r in pending]

    actions: dict[int, Action] = {}
    live: dict[int, Order] = {}
    on_purpose: dict[int, tuple[Order, ...]] = {}
    for rental in pending:
        match = found[rental.id]
        if match.unproven and cancel_unproven and match.maybe:
            on_purpose[rental.id] = match.maybe
        elif match.unproven:
            actions[rental.id] = Action(rental, "unproven", None, match.why)
        elif match.order is None or match.order.expired:
            actions[rental.id] = _settle(ledger, rental, match)
        else:
            live[rental.id] = match.order
    actions.update(_cancel_all(ledger, client, [r for r in pending if r.id in live], live))
    for rental in pending:
        if rental.id in on_purpose:
            actions[rental.id] = _cancel_on_purpose(ledger, client, rental, on_purpose[rental.id])
    done = [actions[r.id] for r in pending]
    for action in done:
        _keep_verdict(ledger, action)
    return done


def _keep_verdict(ledger: RentalLedger, action: Action) -> None:
    """The verdict and its reason, kept (the row's note is only its last word)."""
    order = None if action.order_id is None else str(action.order_id)
    ledger.record_verdict(action.rental.id, f"cleanup: {action.kind}", action.describe(), order)


def _cancel_on_purpose(
    ledger: RentalLedger, client: CloreClient, rental: Rental, orders: tuple[Order, ...]
) -> Action:
    """Cancel every order that may be `rental`'s (a person asked for it), confirm they left
    `my_orders`, and release the rental."""
    ids = ", ".join(str(o.id) for o in orders)
    ledger.set_state(rental.id, "releasing", f"cleanup: cancelling on purpose: order {ids}")
    errors: dict[int, str] = {}
    for order in orders:
        errors.update(_cancel(client, rental, order))
    try:
        listed = _live_ids(client)
        again = [o for o in orders if o.id in listed]
        if again:
            for order in again:
                errors.update(_cancel(client, rental, order))
            client.limiter.back_off(CONFIRM_WAIT_S)
            listed = _live_ids(client)
    except CloreApiError as exc:
        return _error(rental, orders[0].id, f"cancel sent, but could not confirm it: {exc}")
    left = [o.id for o in orders if o.id in listed]
    if left:
        why = errors.get(rental.id) or "cancelled twice, still listed in my_orders"
        return _error(rental, left[0], f"still active: {why}")
    if rental.order_id is None:
        record_order(ledger, rental.id, orders[0].id)
    note = f"cleanup: cancelled on purpose (--cancel-unproven), unproven order {ids}"
    ledger.set_state(rental.id, "released", note)
    return Action(rental, "cancelled", orders[0].id, f"on purpose, unproven order {ids}")


@dataclass(frozen=True)
class _Match:
    """What `my_orders` shows for one rental: its order, and why others on its server are not."""

    order: Order | None
    why: str = ""
    unproven: bool = False  # an order there may be ours, but nothing proves it
    maybe: tuple[Order, ...] = ()  # the live orders that may be ours


def _was_accepted(ledger: RentalLedger, rental: Rental) -> bool:
    return any(v.verdict == ACCEPTED for v in ledger.verdicts(rental.id))


def _look_up(
    client: CloreClient,
    pending: list[Rental],
    owned: set[int],
    clock: Clock,
    settle_s: float,
    accepted: Collection[int] = (),
) -> dict[int, _Match]:
    """Each rental's order in `my_orders`. When a sent create is younger than `settle_s`, its
    order may not be listed yet: wait, then look once more."""
    found = _look(pending, client.my_orders(return_completed=True), owned, accepted)
    unsure = [
        r.create_answered_at or r.create_sent_at or r.created_at
        for r in pending
        if r.order_id is None and r.create_sent_at is not None and found[r.id].order is None
    ]
    wait = max(unsure, default=float("-inf")) + settle_s - clock.time()
    if wait > 0:
        client.limiter.back_off(wait)
        found = _look(pending, client.my_orders(return_completed=True), owned, accepted)
    for pause in (settle_s / 2, settle_s, settle_s):
        if not any(_deploying(m) for m in found.values()):
            break
        # An order that may be ours is still deploying: its tag may be listed only once it
        # is deployed (nothing shows a booting order's echo), so look again, a bounded while.
        client.limiter.back_off(pause)
        found = _look(pending, client.my_orders(return_completed=True), owned, accepted)
    return found


def _deploying(match: _Match) -> bool:
    """An order that may be the rental's is still coming up: not online, or online with its
    container still deploying (`mon_container` 0 or 1, its image pulling)."""
    return match.unproven and any(_coming_up(o) for o in match.maybe)


def _coming_up(order: Order) -> bool:
    pulling = order.mon_container is not None and order.mon_container < 2
    return not order.expired and (not order.online or pulling)


def _look(
    pending: list[Rental], orders: list[Order], owned: set[int], accepted: Collection[int]
) -> dict[int, _Match]:
    """`_match`, then: a rental whose create the API accepted made an order, so finding none
    that may be it is never "nothing was created" (my_orders may list it late)."""
    found = _match(pending, orders, owned, accepted)
    for rental_id in accepted:
        match = found.get(rental_id)
        if match is not None and match.order is None and not match.unproven:
            why = (
                "our create was accepted (code 0), so an order was made, yet my_orders lists "
                f"none that may be it: {match.why or 'no order on the server'}"
            )
            found[rental_id] = _Match(None, why, unproven=True)
    return found


def _match(
    pending: list[Rental], orders: list[Order], owned: set[int], accepted: Collection[int] = ()
) -> dict[int, _Match]:
    by_id = {o.id: o for o in orders}
    found = {r.id: _Match(by_id.get(order)) for r in pending if (order := order_of(r)) is not None}
    taken = set(owned)
    for rental in pending:
        if rental.order_id is not None:
            continue
        claim = Claim.of(rental)
        if claim is None:
            found[rental.id] = _unclaimed(rental, orders)
            continue
        verdict = find_ours(orders, claim, taken)
        if verdict.order is None and rental.id in accepted:
            # The ledger shows the API accepted this create: the proof the run itself would
            # have used (our tag, stamped after our send however late) holds after its death.
            late = after_success(orders, claim, taken)
            if late is not None:
                verdict = Verdict(late, verdict.not_ours)
        why = verdict.describe()
        if verdict.maybe:
            named = ", ".join(str(o.id) for o in verdict.maybe)
            why = f"order {named} may be ours, none is proven: {why}"
        found[rental.id] = _Match(verdict.order, why, verdict.ambiguous, verdict.maybe)
        if verdict.order is not None:
            taken.add(verdict.order.id)
    return found


def _unclaimed(rental: Rental, orders: list[Order]) -> _Match:
    """A rental that makes no claim: its create never went out (nothing to adopt), or it was
    written by a clore-run whose creates carried no tag (nothing can be proven)."""
    if not rental.legacy and rental.create_sent_at is None:
        return _Match(None)  # its create never went out
    live = tuple(o for o in orders if o.si == rental.server_id and not o.expired)
    there = [o.id for o in live]
    listed = f"; live orders on it: {', '.join(map(str, there))}" if there else ""
    why = (
        f"recorded by an older clore-run whose creates carried no tag, so no order on server "
        f"{rental.server_id} can be proven its own{listed}: check them on clore.ai and cancel "
        "by hand what is yours, or all of them with --cancel-unproven"
    )
    return _Match(None, why, unproven=bool(there), maybe=live)


def _verdict(rental: Rental, match: _Match, *, dry_run: bool) -> Action:
    order = match.order
    order_id = order.id if order is not None else order_of(rental)
    if match.unproven:
        return Action(rental, "unproven", None, match.why, dry_run=dry_run)
    if order is not None and not order.expired:
        return Action(rental, "cancelled", order_id, dry_run=dry_run)
    if order is None and rental.order_id is None:
        return Action(rental, "nothing-created", None, match.why, dry_run=dry_run)
    return Action(rental, "ended", order_id, _ended_words(rental, order), dry_run=dry_run)


def _ended_words(rental: Rental, order: Order | None) -> str:
    """What an order that ended (by itself, or by a cancel we did not see confirmed) billed
    up to its own end, in words; nothing when the listing does not say."""
    cost = ended_cost_usd(rental, order) if order is not None else None
    if order is None or cost is None:
        return ""
    lived_s = bill.ended_lived_s(order.ct, order.order_end)
    when = f" after {lived_s / 60:.0f} min" if lived_s is not None else ""
    return f"billed {usd_text(cost)} up to its end{when}"


def _settle(ledger: RentalLedger, rental: Rental, match: _Match) -> Action:
    """Record a rental with nothing to cancel."""
    action = _verdict(rental, match, dry_run=False)
    if action.kind == "nothing-created":
        note = "cleanup: no order of ours in my_orders"
        ledger.set_state(rental.id, "failed", f"{note} ({match.why})" if match.why else note)
    else:
        if rental.order_id is None and action.order_id is not None:
            record_order(ledger, rental.id, action.order_id)
        said = f" ({action.detail})" if action.detail else ""
        ledger.set_state(rental.id, "released", f"cleanup: order already ended{said}")
    return action


def _cancel_all(
    ledger: RentalLedger, client: CloreClient, rentals: list[Rental], live: dict[int, Order]
) -> dict[int, Action]:
    """Cancel every live order, confirm each left `my_orders` (one more cancel for those still
    listed), and mark the confirmed ones released. Confirming is one listing for all of them."""
    if not rentals:
        return {}
    errors: dict[int, str] = {}
    for rental in rentals:
        if rental.order_id is None:
            record_order(ledger, rental.id, live[rental.id].id)
        ledger.set_state(rental.id, "releasing", "cleanup: cancelling")
        errors.update(_cancel(client, rental, live[rental.id]))
    try:
        listed = _live_ids(client)
        again = [r for r in rentals if live[r.id].id in listed]
        if again:
            for rental in again:
                errors.update(_cancel(client, rental, live[rental.id]))
            client.limiter.back_off(CONFIRM_WAIT_S)  # it can stay listed briefly after an OK
            listed = _live_ids(client)
    except CloreApiError as exc:
        why = f"cancel sent, but could not confirm it in my_orders: {exc}"
        return {r.id: _error(r, live[r.id].id, why) for r in rentals}
    actions: dict[int, Action] = {}
    for rental in rentals:
        order_id = live[rental.id].id
        if order_id in listed:
            why = errors.get(rental.id) or "cancelled twice, still listed in my_orders"
            actions[rental.id] = _error(rental, order_id, f"still active: {why}")
        else:
            ledger.set_state(rental.id, "released", "cleanup: cancelled, gone from my_orders")
            actions[rental.id] = Action(rental, "cancelled", order_id)
    return actions


def _cancel(client: CloreClient, rental: Rental, order: Order) -> dict[int, str]:
    """Cancel `order`; the error text if the API refused (the listing decides what happened)."""
    try:
        client.cancel_order(order.id)
    except CloreApiError as exc:
        return {rental.id: str(exc)}
    return {}


def _live_ids(client: CloreClient) -> set[int]:
    return {o.id for o in client.my_orders() if not o.expired}


def _error(rental: Rental, order_id: int | None, detail: str, hint: str = "") -> Action:
    return Action(rental, "error", order_id, detail, hint=hint)
