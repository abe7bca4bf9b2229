"""Which order in `my_orders` is provably the one our create made.

`create_order` answers no id, and one API key may serve several runs (each with its own ledger),
so "the newest order on that server" can be another run's, and so can an order created in the
moments around our create: two runs racing for one host send their creates within a second of
each other. Proof is something the API echoes back that no other run can produce: every create
carries a *tag*, a container port drawn at random for this create alone and asked for as the
order's one HTTP port (`ports: {"<tag>": "http"}`); `my_orders` echoes it as `http_port`. The
tag is written to the ledger row before the request goes out. An order is ours only when:
- our create was *sent* (an intent without that mark made nothing);
- the order is on the server we asked for (`si`) and echoes our tag;
- nothing else rules it out: its creation time `ct` (the API's clock, read through the measured
  offset) lies in the window from the send to the answer, and what the API echoes of what we
  chose (image, currency, spot, the bid) agrees. These only ever rule an order out: a time
  window proves nothing, since another run's create can fall in it;
- no other rental already owns the order, and no second order fits the same claim.
An order echoing another tag is not ours, whenever it was made. One that echoes no tag at all
(the API left `http_port` out), or echoes ours with something else off, proves nothing either
way: listed with the reason, never cancelled, the rental kept open (`unproven`).

A create the API refused (codes 2-6: server-already-rented, too_low_price, not_enough_balance,
...) made nothing: its row is `failed` and never looked for again. Only an ambiguous failure
(HTTP 500 / code 1, no reply) leaves a row whose order is looked for, by its tag.

Why an HTTP port: of what `create_order` takes, only the image, the currency, the bid and the
ports come back in `my_orders` (`env`, `ssh_key`, `jupyter_token`, `command` do not), and only a
port can carry a random value without changing what runs. The tag is drawn from the dynamic
range (49152-65535), where servers seldom listen: Clore's proxy publishes whatever listens on it
at the order's `http_pub`. Two racing creates on one host share a tag with odds 1 in 16,384, and
even then the image, currency and window must agree as well.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Protocol

from runner.backends.clore.models import Order
from runner.stores.ledger import LedgerError, Rental, RentalLedger

# Without one reply carrying a `Date`, our clock and the API's are assumed this far apart at most.
UNMEASURED_OFFSET_S = 30.0
# How long after the create's answer the API may still stamp the order: it lists a new order a
# few seconds after the create (G-gv waited up to 20 s between looks).
LISTING_LAG_S = 15.0
# A create whose answer we never saw (the process died) ran at most this long: the client's
# connect and read timeouts.
LONGEST_CREATE_S = 70.0
_PRICE_TOLERANCE = 1e-6  # relative: the bid comes back as the JSON number we sent
TAG_LOW, TAG_HIGH = 49152, 65535  # the dynamic port range: where a tag is drawn from


def new_tag() -> int:
    """A fresh tag for one create: a container port in the dynamic range, drawn at random."""
    return TAG_LOW + secrets.randbelow(TAG_HIGH - TAG_LOW + 1)


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

    def sent(self, at_unix_s: float, offset: ClockOffset, tag: int) -> None: ...

    def answered(self, at_unix_s: float) -> None: ...


@dataclass(frozen=True)
class LedgerMarks:
    """A create's marks written to its ledger row. A failing write before the send stops the
    send (LedgerError): a create the ledger cannot prove must not go out."""

    ledger: RentalLedger
    rental_id: int

    def sent(self, at_unix_s: float, offset: ClockOffset, tag: int) -> None:
        bounds = (offset.low_s, offset.high_s) if offset.measured else None
        self.ledger.mark_create_sent(self.rental_id, at_unix_s, bounds, tag=tag)

    def answered(self, at_unix_s: float) -> None:
        with contextlib.suppress(LedgerError):  # the send bound alone still proves the order
            self.ledger.mark_create_answered(self.rental_id, at_unix_s)


@dataclass(frozen=True)
class Claim:
    """What we know of one create of ours: where, its tag, what, and when (our unix clock)."""

    server_id: int
    sent_unix_s: float
    offset: ClockOffset
    answered_unix_s: float | None = None
    tag: int | None = None  # None: the create carried none, so no order can be proven its
    image: str | None = None  # None: not recorded, not checked
    currency: str | None = None
    spot: bool | None = None
    spot_price_per_day: float | None = None

    @classmethod
    def of(cls, rental: Rental) -> Claim | None:
        """The claim a ledger row makes, or None when it makes none (no create was sent, or
        the row is older than the tags)."""
        if rental.create_sent_at is None or rental.legacy or rental.tag is None:
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
            rental.tag,
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
        """Why `order` is not proven this create's order, or None when it is."""
        if order.si != self.server_id:
            return f"on server {order.si}, not {self.server_id}"
        tag = self.tag_mismatch(order)
        if tag is not None:
            return tag
        if order.ct is None:
            return "the API gave no creation time (ct), so it cannot be told apart"
        low, high = self.window()
        if not low <= order.ct <= high:
            return (
                f"created at {order.ct:.0f}, outside {low:.0f}..{high:.0f} (our create, "
                f"clock offset {self.offset.describe()})"
            )
        return self._echo_mismatch(order)

    def tag_mismatch(self, order: Order) -> str | None:
        """Why the tag `order` echoes is not ours (None: it is ours)."""
        echoed = (order.http_port or "").strip()
        if not echoed:
            return f"it echoes no tag (http_port), ours was {self.tag}"
        if echoed != str(self.tag):
            return f"its tag (http_port) is {echoed}, ours was {self.tag}"
        return None

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
    rentals). A wrong server, another tag, another rental's hold, or a creation time outside
    the window prove an order is not ours. A live order that echoes no tag (it might be ours:
    nothing tells), or ours with another check off (the API might have rewritten a value), or
    two that fit, leave the claim `ambiguous`: reported, not guessed, the rental kept open."""
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
        doubtful = doubtful or (not order.expired and _maybe_ours(order, claim))
    if len(fits) > 1:
        ids = ", ".join(str(o.id) for o in fits)
        reasons.append(f"orders {ids} all fit the create: none can be proven ours")
        return Verdict(None, tuple(reasons), ambiguous=True)
    if fits:
        return Verdict(fits[0], tuple(reasons))
    return Verdict(None, tuple(reasons), ambiguous=doubtful)


def after_success(
    orders: Iterable[Order], claim: Claim, taken: Collection[int] = ()
) -> Order | None:
    """After a create the API answered as a success, while the tag is not listed yet: the one
    live order on the server, made in the create's window, that lists no tag at all and
    whose echoed image, currency and bid agree. A server holds one renter at a time, so with
    our create accepted an order listed on it since then is ours; an order still listed from
    before (a cancel lagging) is outside the window. Only the run that got the answer may
    use this: nothing later can tell that the answer was a success."""
    low, high = claim.window()
    fits = [
        o
        for o in orders
        if o.si == claim.server_id
        and o.id not in taken
        and not o.expired
        and not (o.http_port or "").strip()
        and o.ct is not None
        and low <= o.ct <= high
        and claim._echo_mismatch(o) is None
    ]
    return fits[0] if len(fits) == 1 else None


def _maybe_ours(order: Order, claim: Claim) -> bool:
    """An order that failed a check yet may be ours: it echoes our tag, or none at all, and
    was made in the create's window (or says not when)."""
    echoed = (order.http_port or "").strip()
    if echoed and echoed != str(claim.tag):
        return False
    low, high = claim.window()
    return order.ct is None or low <= order.ct <= high
