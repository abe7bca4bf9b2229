"""`clore-run cleanup --runners`: the cron reaper for runner rentals past their cap.

A stop job that never ran (the workflow cancelled, the runner job's machine dead) leaves its
server billed. The action uploads each start's record as an artifact named
`clore-runner-record-<label>`; the reaper (a scheduled workflow, GITHUB_TOKEN with
`actions: read`) reads the records it may believe (artifacts.py) and cancels every rental past
its cap (plus a grace for a stop job still running) whose order a record proves ours.

A record is still only a claim, so what it decides is bounded:
- one `my_orders` read per reap: every order's fate is decided against that one listing;
- an order is decided only by records that pass the proof (the listing has the order with the
  record's server and creation time); a record that fails it says so and decides nothing, so it
  can neither settle nor cancel an order another record names;
- the cap is the latest any proving record gives (a copy with an earlier cap cannot cut a live
  runner short) and never past the order's own creation plus the reaper's maximum life
  (`max_life_s`, the operator's, default 24 h: a far cap cannot keep an orphan billing).
The cancels go out together and are confirmed by shared listings, not one per rental.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from runner.backends.clore.api import CloreClient
from runner.backends.clore.errors import CloreApiError
from runner.backends.clore.models import Order
from runner.backends.clore.runner_release import (
    FIRST_PAUSE_S,
    billed,
    offline_note,
    preempted_note,
    proof_mismatch,
)
from runner.backends.runner_record import (
    GRACE_S,
    MAX_LIFE_S,
    Reaped,
    Released,
    RunnerRecord,
    RunnerRental,
)
from runner.clock import Clock
from runner.errors import InfrastructureError


@dataclass(frozen=True)
class _Verdict:
    rental: RunnerRental
    order: Order | None
    cap_unix: float = 0.0
    why_not: str = ""  # no record proves the order: why the first one does not
    maybe: Order | None = None  # unproven, yet live in this key's my_orders: may be ours


def reap(
    records: Iterable[RunnerRecord],
    client: CloreClient,
    clock: Clock | None = None,
    *,
    dry_run: bool = False,
    grace_s: float = GRACE_S,
    max_life_s: float = MAX_LIFE_S,
    confirm_within_s: float = 30.0,
    cancel_unproven: bool = False,
) -> list[Reaped]:
    """Cancel every proven rental of `records` past its cap (and grace); say what was done.
    A live order a record names but does not prove may be ours: it is named (`unproven`)
    and left, or, `cancel_unproven` (a person's decision), cancelled once it has lived
    `max_life_s` from its own creation (see `_on_purpose`). `clock`: None, the client's own
    (its calls' pacing runs on it)."""
    if clock is None:
        clock = client.limiter.clock
    try:
        listed = {o.id: o for o in client.my_orders(return_completed=True)}
    except CloreApiError as exc:
        raise InfrastructureError(f"could not list the orders (my_orders): {exc}") from None
    done: list[Reaped] = []
    due: list[tuple[RunnerRental, Order]] = []
    now = clock.time()
    for verdict in _judge(records, listed, max_life_s):
        rental, order = verdict.rental, verdict.order
        if verdict.maybe is not None and cancel_unproven:
            order, verdict = verdict.maybe, _on_purpose(verdict, verdict.maybe, max_life_s, now)
        elif verdict.maybe is not None:
            done.append(Reaped(rental, None, _unproven_note(verdict), unproven=True))
            continue
        if order is None:
            done.append(Reaped(rental, None, verdict.why_not))
            continue
        if order.expired:
            ended = billed(rental, order, "ended", clock, verdict.cap_unix, preempted_note(rental))
            done.append(Reaped(rental, ended))
            continue
        over_s = now - verdict.cap_unix
        if over_s < 0:
            done.append(Reaped(rental, None, f"within its cap ({-over_s / 60:.0f} min left)"))
        elif over_s < grace_s:
            done.append(
                Reaped(rental, None, "just past its cap: its stop job may still be running")
            )
        elif dry_run:
            done.append(
                Reaped(rental, None, f"past its cap by {over_s / 60:.0f} min: would cancel")
            )
        else:
            due.append((rental, order))
    done += _cancel_all(client, due, clock, confirm_within_s)
    return done


def _judge(
    records: Iterable[RunnerRecord], listed: dict[int, Order], max_life_s: float
) -> list[_Verdict]:
    """One verdict per order id the records name: proven (with the cap to hold it to) or not."""
    named: dict[int, list[RunnerRental]] = {}
    for record in records:
        for rental in record.runners:
            named.setdefault(rental.order_id, []).append(rental)
    verdicts = []
    for order_id, rentals in named.items():
        order = listed.get(order_id)
        if order is None:
            verdicts.append(
                _Verdict(rentals[0], None, why_not=f"order {order_id} is not in my_orders")
            )
            continue
        proven = [r for r in rentals if proof_mismatch(order, r) is None]
        if not proven:
            why = proof_mismatch(order, rentals[0])
            maybe = None if order.expired else order
            verdicts.append(
                _Verdict(rentals[0], None, why_not=f"{why}: not provably ours", maybe=maybe)
            )
            continue
        rental = max(proven, key=lambda r: r.cap_unix)
        cap_unix = min(rental.cap_unix, rental.created_unix + max_life_s)
        verdicts.append(_Verdict(rental, order, cap_unix))
    return verdicts


def _unproven_note(verdict: _Verdict) -> str:
    return (
        f"{verdict.why_not}: it may be ours, left running (it may be billed); if no other run "
        "uses this API key, `clore-run cleanup --runners --cancel-unproven` cancels it"
    )


def _on_purpose(verdict: _Verdict, order: Order, max_life_s: float, now: float) -> _Verdict:
    """An unproven order judged as proven, on a person's word, against the one bound no
    record chooses: its own creation (as listed) plus the reaper's maximum life. The record's
    cap is not believed: it proves nothing of this order, and a forged one must not cut a live
    runner short (`--max-hours` brings the bound nearer)."""
    created = order.ct if order.ct is not None else now
    return _Verdict(verdict.rental, order, created + max_life_s)


def _cancel_all(
    client: CloreClient,
    due: list[tuple[RunnerRental, Order]],
    clock: Clock,
    within_s: float,
) -> list[Reaped]:
    """Cancel every due order, then confirm them all with shared listings (one per pause,
    not one per rental), cancelling again what is still live, for `within_s`."""
    if not due:
        return []
    notes = {rental.order_id: offline_note(rental, order) for rental, order in due}
    ended_at = clock.time()
    pending = {rental.order_id: (rental, order) for rental, order in due}
    done: list[Reaped] = []
    deadline = clock.now() + within_s
    pause_s = FIRST_PAUSE_S
    while True:
        for order_id in pending:
            with contextlib.suppress(
                CloreApiError
            ):  # ended already, or a hiccup: the listing decides
                client.cancel_order(order_id)
        client.limiter.back_off(pause_s)  # an order stays listed a moment after its cancel
        try:
            listed = {o.id: o for o in client.my_orders(return_completed=True)}
        except CloreApiError as exc:
            for rental, _ in pending.values():
                done.append(
                    Reaped(rental, Released(rental, "error", f"order {rental.order_id}: {exc}"))
                )
            return done
        last = clock.now() + pause_s > deadline
        for order_id, (rental, order) in list(pending.items()):
            now_listed = listed.get(order_id)
            if now_listed is None:  # gone from the listing: ended, with no bill to read
                now_listed = order.model_copy(update={"expired": True, "spend": None})
            if now_listed.expired:
                released = billed(rental, now_listed, "cancelled", clock, ended_at, notes[order_id])
                done.append(Reaped(rental, released))
                del pending[order_id]
            elif last:
                why = f"order {order_id} is still listed after its cancel"
                done.append(Reaped(rental, Released(rental, "still-live", why)))
                del pending[order_id]
        if not pending:
            return done
        pause_s = min(pause_s * 2, 8.0)


__all__ = ["reap"]
