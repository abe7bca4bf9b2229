"""Which order in `my_orders` is provably the one our create made.

`create_order` answers no id, and one API key may serve several runs (each with its own ledger),
so "the newest order on that server" can be another run's. An order is ours only when all of
this holds:
- our create was *sent*: the ledger marks the moment, just before the request goes out, and an
  intent without that mark made nothing;
- the order is on the server we asked for (`si`);
- its creation time `ct` (the API's clock) falls in the window from the send to the answer (or,
  when the process died before the answer, to the longest a create request can take), read
  through the offset between our clock and the API's, which is measured from the `Date` header
  of its replies rather than assumed, plus the time the API may take to list a new order;
- what the API echoes of what we chose for that order agrees: the `image`, the `currency`,
  whether it is `spot` and, for spot, the bid. (The API echoes none of `env`, `ssh_key` or
  `jupyter_token`: the captured `my_orders` replies carry none of them, so the fake does not
  either, and they cannot be checked.)
- no other rental already owns the order, and no second order fits the same claim.
Anything else is not ours: never cancelled by `cleanup`, never adopted by create recovery, and
listed with the reason.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Protocol

from runner.backends.clore.models import Order
from runner.ledger import LedgerError, Rental
from runner.stores.ledger import RentalLedger

# Without one reply carrying a `Date`, our clock and the API's are assumed this far apart at most.
UNMEASURED_OFFSET_S = 30.0
# How long after the create's answer the API may still stamp the order: it lists a new order a
# few seconds after the create (G-gv waited up to 20 s between looks).
LISTING_LAG_S = 15.0
# A create whose answer we never saw (the process died) ran at most this long: the client's
# connect and read timeouts.
LONGEST_CREATE_S = 70.0
_PRICE_TOLERANCE = 1e-6  # relative: the bid comes back as the JSON number we sent


@dataclass(frozen=True)
class ClockOffset:
    """The API's unix clock minus ours lies within [low_s, high_s]."""

    low_s: float
    high_s: float
    measured: bool = True

    def describe(self) -> str:
        if not self.measured:
            return f"not measured (assumed within ±{UNMEASURED_OFFSET_S:g} s)"
        return f"{self.low_s:+.1f}..{self.high_s:+.1f} s"


UNMEASURED = ClockOffset(-UNMEASURED_OFFSET_S, UNMEASURED_OFFSET_S, measured=False)


class OffsetMeter:
    """Narrows the clock offset with every reply. A `Date` header has one-second resolution and
    was stamped somewhere between our send and our receipt, so each reply bounds the offset to
    [date - received, date + 1 - sent]; successive replies intersect. A bound that no longer
    intersects (our clock was stepped) starts over from the newest reply."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset: ClockOffset | None = None

    def observe(self, date_header: str | None, sent_unix_s: float, received_unix_s: float) -> None:
        date = _parse_date(date_header)
        if date is None:
            return
        low, high = date - received_unix_s, date + 1.0 - sent_unix_s
        with self._lock:
            old = self._offset
            if old is not None and max(old.low_s, low) <= min(old.high_s, high):
                low, high = max(old.low_s, low), min(old.high_s, high)
            self._offset = ClockOffset(low, high)

    def current(self) -> ClockOffset:
        with self._lock:
            return self._offset or UNMEASURED


def _parse_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        stamp = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return stamp if math.isfinite(stamp) else None


class CreateJournal(Protocol):
    """Hears of one create: the moment it goes out and the moment it was answered."""

    def sent(self, at_unix_s: float, offset: ClockOffset) -> None: ...

    def answered(self, at_unix_s: float) -> None: ...


@dataclass(frozen=True)
class LedgerMarks:
    """A create's marks written to its ledger row. A failing write before the send stops the
    send (LedgerError): a create the ledger cannot prove must not go out."""

    ledger: RentalLedger
    rental_id: int

    def sent(self, at_unix_s: float, offset: ClockOffset) -> None:
        bounds = (offset.low_s, offset.high_s) if offset.measured else None
        self.ledger.mark_create_sent(self.rental_id, at_unix_s, bounds)

    def answered(self, at_unix_s: float) -> None:
        with contextlib.suppress(LedgerError):  # the send bound alone still proves the order
            self.ledger.mark_create_answered(self.rental_id, at_unix_s)


@dataclass(frozen=True)
class Claim:
    """What we know of one create of ours: where, what, and when (our unix clock)."""

    server_id: int
    sent_unix_s: float
    offset: ClockOffset
    answered_unix_s: float | None = None
    image: str | None = None  # None: not recorded, not checked
    currency: str | None = None
    spot: bool | None = None
    spot_price_per_day: float | None = None

    @classmethod
    def of(cls, rental: Rental) -> Claim | None:
        """The claim a ledger row makes, or None when it makes none (no create was sent, or
        the row is older than the marks)."""
        if rental.create_sent_at is None or rental.legacy:
            return None
        low, high = rental.api_offset_low_s, rental.api_offset_high_s
        offset = UNMEASURED if low is None or high is None else ClockOffset(low, high)
        # No bid check from the ledger: a create refused as too low is sent again with a higher
        # bid, and the row keeps the first.
        return cls(
            rental.server_id,
            rental.create_sent_at,
            offset,
            rental.create_answered_at,
            rental.image,
            rental.currency,
            rental.spot,
        )

    def window(self) -> tuple[float, float]:
        """The range of `ct` (API unix seconds) an order made by this create can carry. `ct` is
        whole seconds, cut down: hence the second less at the start."""
        end = self.answered_unix_s
        if end is None:
            end = self.sent_unix_s + LONGEST_CREATE_S
        low = self.sent_unix_s + self.offset.low_s - 1.0
        return low, end + self.offset.high_s + LISTING_LAG_S

    def mismatch(self, order: Order) -> str | None:
        """Why `order` is not this create's order, or None when everything agrees."""
        if order.si != self.server_id:
            return f"on server {order.si}, not {self.server_id}"
        if order.ct is None:
            return "the API gave no creation time (ct), so it cannot be told apart"
        low, high = self.window()
        if not low <= order.ct <= high:
            return (
                f"created at {order.ct:.0f}, outside {low:.0f}..{high:.0f} (our create, "
                f"clock offset {self.offset.describe()})"
            )
        return self._echo_mismatch(order)

    def _echo_mismatch(self, order: Order) -> str | None:
        checks = (
            ("image", self.image, order.image),
            ("currency", self.currency, order.currency),
            ("spot", self.spot, order.spot),
        )
        for name, ours, theirs in checks:
            if ours is not None and theirs is not None and ours != theirs:
                return f"its {name} is {theirs!r}, ours was {ours!r}"
        bid, price = self.spot_price_per_day, order.price
        if not self.spot or bid is None or price is None:
            return None
        if math.isclose(price, bid, rel_tol=_PRICE_TOLERANCE):
            return None
        return f"its price is {price:g}/day, our bid was {bid:g}/day"


@dataclass(frozen=True)
class Verdict:
    """The order proven ours (or None), and why each other order on the server is not."""

    order: Order | None
    not_ours: tuple[str, ...] = ()
    ambiguous: bool = False

    def describe(self) -> str:
        return "; ".join(self.not_ours)


def find_ours(orders: Iterable[Order], claim: Claim, taken: Collection[int] = ()) -> Verdict:
    """The one order `claim` proves ours among `orders` (orders in `taken` belong to other
    rentals). Only a wrong server, a creation time outside the window or another rental's hold
    prove an order is not ours. A live order in the window that fails another check (no `ct`,
    an echoed value that differs: the API might have rewritten it) or two that fit leave the
    claim `ambiguous`: reported, not guessed, and the rental kept open."""
    fits: list[Order] = []
    reasons: list[str] = []
    doubtful = False
    for order in orders:
        if order.si != claim.server_id:
            continue
        if order.id in taken:
            reasons.append(f"order {order.id}: another rental in the ledger holds it")
            continue
        why = claim.mismatch(order)
        if why is None:
            fits.append(order)
            continue
        reasons.append(f"order {order.id}: {why}")
        doubtful = doubtful or (not order.expired and _in_window(order, claim))
    if len(fits) > 1:
        ids = ", ".join(str(o.id) for o in fits)
        reasons.append(f"orders {ids} all fit the create: none can be proven ours")
        return Verdict(None, tuple(reasons), ambiguous=True)
    if fits:
        return Verdict(fits[0], tuple(reasons))
    return Verdict(None, tuple(reasons), ambiguous=doubtful)


def _in_window(order: Order, claim: Claim) -> bool:
    low, high = claim.window()
    return order.ct is None or low <= order.ct <= high
