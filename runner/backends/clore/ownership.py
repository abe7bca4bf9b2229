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
An order echoing another create's tag is not ours, whenever it was made. One that echoes no
tag at all (the API left `http_port` out), a port no create of ours draws (a defaulted one), a
shape we cannot read, or ours with something else off (even its `ct`), proves nothing either
way: listed with the reason, never cancelled by a guess, the rental kept open (`unproven`). A
tag match is at worst unproven, never "not ours": the evidence for `ct` is one capture, and
what it stamps (the create? the deploy?) is unknown.

The echo is read tolerantly (`read_echo`): the one capture shows the container port as the
string we sent ("8080"); the official SDK types it an integer; "PORT/http" or a list are what
a proxy-minded API could answer. Each is read as the ports it names; anything else is logged
once and read as "unknown shape", never as another tag.

A create the API refused (codes 2-6: server-already-rented, too_low_price, not_enough_balance,
...) made nothing: its row is `failed` and never looked for again. Only an ambiguous failure
(HTTP 500 / code 1, no reply) leaves a row whose order is looked for, by its tag.

Why an HTTP port: of what `create_order` takes, only the image, the currency, the bid and the
ports come back in `my_orders` (`env`, `ssh_key`, `jupyter_token`, `command` do not), and only a
port can carry a random value without changing what runs.

Why 3002-9999: the ports seen accepted as an order's HTTP port are 8080, 8188, 8888 and 3000,
none above 10000 (reference §9). A tag the API might refuse or replace with a default would
make every order of ours unprovable, so tags are drawn where the evidence is, not from the
dynamic range (49152-65535) older versions used. Clore's proxy publishes whatever listens on the
tag at the order's `http_pub`, so the ports well-known services listen on (`SERVICE_PORTS`:
jupyter, gradio, tensorboard, databases, ...) are never drawn: a job's own server is not put on
a public URL by our proof. About 6,900 ports remain: two racing creates on one host share a
tag with odds 1 in 6,900, and even then the image, currency and window must agree as well.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import secrets
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Protocol

from runner.backends.clore.models import Order
from runner.core.pulls import DEFAULT_DEPLOY_BOUND_S
from runner.stores.ledger import LedgerError, Rental, RentalLedger
from runner.untrusted import console_line

log = logging.getLogger(__name__)

# Without one reply carrying a `Date`, our clock and the API's are assumed this far apart at most.
UNMEASURED_OFFSET_S = 30.0
# How long after the create's answer the API may still stamp the order: it lists a new order a
# few seconds after the create (G-gv waited up to 20 s between looks).
LISTING_LAG_S = 15.0
# A create whose answer we never saw (the process died) ran at most this long: the client's
# connect and read timeouts.
LONGEST_CREATE_S = 70.0
# How much later than the create's window `ct` may stamp an order that may still be ours (its
# tag not listed, or unreadable): if `ct` stamps the deploy, not the create, it comes after
# the image's pull, waited for up to this long for an image never seen; the one capture's
# `order_end - ct` falls ~58 s short of what it billed. Only ever names an order (unproven),
# never adopts one: past it, an order without a readable tag is some later renter's.
LATE_STAMP_S = DEFAULT_DEPLOY_BOUND_S
_PRICE_TOLERANCE = 1e-6  # relative: the bid comes back as the JSON number we sent
ACCEPTED = "create-accepted"  # the ledger's verdict for a create the API answered with code 0
ACCEPTED_WHY = "the API answered the create with code 0: an order was made, and it is ours"
TAG_LOW, TAG_HIGH = 3002, 9999  # where a tag is drawn from (see the module's doc)
OLD_TAG_LOW, OLD_TAG_HIGH = 49152, 65535  # where older versions drew theirs (their rows live on)
# Ports well-known servers listen on: never drawn, so that no job's own server is published at
# the order's public URL by our tag; one of them echoed back is no create's tag (a default?).
SERVICE_PORTS = frozenset(
    {3306, 3389, 4000, 4040, 4200, 4443, 5000, 5001, 5005, 5173, 5432, 5555, 5601, 5672}
    | {5900, 5901, 6006, 6379, 6443, 6543, 6660, 6666, 6667, 6669, 6789, 6800, 6881, 7000}
    | {7001, 7474, 7860, 7861, 8000, 8001, 8008, 8069, 8080, 8081, 8082, 8088, 8123, 8188}
    | {8265, 8443, 8500, 8501, 8787, 8888, 8889, 9000, 9001, 9090, 9091, 9200, 9229, 9300}
    | {9418, 9443, 9999}
)
_TAGS = tuple(p for p in range(TAG_LOW, TAG_HIGH + 1) if p not in SERVICE_PORTS)
# One port as an echo may write it: "8080", "8080/http", "8080.0" (a float), "8080:31234"
# (container:public, as `tcp_ports` writes them).
_ECHOED_PORT = re.compile(r"\s*(\d{1,5})(?:\.0+)?\s*(?:/\s*[A-Za-z]+|:\s*\d{1,5})?\s*")


def order_of(rental: Rental) -> int | None:
    """The Clore order a ledger row names. The ledger keeps every marketplace's order ids as
    text; Clore's are whole numbers, and this is where one becomes the other (an int never
    equals its text: a lookup keyed by `Order.id` with the ledger's text finds nothing)."""
    return None if rental.order_id is None else int(rental.order_id)


def record_order(ledger: RentalLedger, rental_id: int, order_id: int) -> None:
    """Write a Clore order id to the ledger row `rental_id`, as the ledger's text."""
    ledger.set_order(rental_id, str(order_id))


def new_tag() -> int:
    """A fresh tag for one create: a container port drawn at random where the evidence shows
    HTTP ports accepted, leaving out the ports well-known services listen on."""
    return _TAGS[secrets.randbelow(len(_TAGS))]


def is_a_tag(port: int) -> bool:
    """Could a create of clore-run (this version or an older one) have drawn `port`? An echo
    of any other port is no create's tag: the API may have put a default in its place."""
    drawn_now = TAG_LOW <= port <= TAG_HIGH and port not in SERVICE_PORTS
    return drawn_now or OLD_TAG_LOW <= port <= OLD_TAG_HIGH


@dataclass(frozen=True)
class EchoReading:
    """What an order's `http_port` says, read tolerantly: the ports it names, and whether any
    part of it was in a shape we do not know."""

    ports: frozenset[int] = frozenset()
    unknown: bool = False

    @property
    def absent(self) -> bool:
        return not self.ports and not self.unknown


_shapes_logged: set[str] = set()
_shapes_lock = threading.Lock()


def read_echo(text: str | None) -> EchoReading:
    """The ports an echo names: "8080", 8080, "8080/http", a list of them (the model joins a
    list with commas). A part in any other shape is logged once (as one safe line, cut short)
    and makes the reading `unknown`: proof of nothing, never of another tag."""
    if text is None or not text.strip():
        return EchoReading()
    ports: set[int] = set()
    unknown = False
    for part in text.split(","):
        match = _ECHOED_PORT.fullmatch(part)
        if match is None or not 0 < int(match.group(1)) <= 65535:
            unknown = True
            continue
        ports.add(int(match.group(1)))
    if unknown:
        _log_shape_once(text)
    return EchoReading(frozenset(ports), unknown)


def _log_shape_once(part: str) -> None:
    """An echo we cannot read, said once per shape (digits folded) so a run polling every few
    seconds does not repeat it; the text comes from the API, so it is one safe line, cut."""
    safe = console_line(part)
    shape = re.sub(r"\d+", "N", safe)[:40]
    with _shapes_lock:
        if shape in _shapes_logged:
            return
        _shapes_logged.add(shape)
    log.warning(
        "my_orders shows an http_port in a shape clore-run does not know: %r; an order "
        "showing it is treated as unproven (maybe ours), never as another run's",
        safe[:80],
    )


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

    def answered(self, at_unix_s: float, accepted: bool = False) -> None: ...


@dataclass(frozen=True)
class LedgerMarks:
    """A create's marks written to its ledger row. A failing write before the send stops the
    send (LedgerError): a create the ledger cannot prove must not go out."""

    ledger: RentalLedger
    rental_id: int

    def sent(self, at_unix_s: float, offset: ClockOffset, tag: int) -> None:
        bounds = (offset.low_s, offset.high_s) if offset.measured else None
        self.ledger.mark_create_sent(self.rental_id, at_unix_s, bounds, tag=tag)

    def answered(self, at_unix_s: float, accepted: bool = False) -> None:
        """`accepted`: the API answered code 0, so an order was made. Kept as a verdict: a
        cleanup after a crash then never takes its absence from `my_orders` for "nothing"."""
        with contextlib.suppress(LedgerError):  # the send bound alone still proves the order
            self.ledger.mark_create_answered(self.rental_id, at_unix_s)
            if accepted:
                self.ledger.record_verdict(self.rental_id, ACCEPTED, ACCEPTED_WHY)


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
        reading = read_echo(order.http_port)
        if self.tag is not None and self.tag in reading.ports:
            return None
        if reading.absent:
            return f"it echoes no tag (http_port), ours was {self.tag}"
        if reading.unknown:
            return f"its http_port {order.http_port!r} is in a shape we cannot read"
        return f"its tag (http_port) is {order.http_port}, ours was {self.tag}"

    def tag_matches(self, order: Order) -> bool:
        return self.tag is not None and self.tag in read_echo(order.http_port).ports

    def another_tag(self, order: Order) -> bool:
        """Does `order` echo, readably, only tags of other creates? That alone proves it is
        not ours; an absent, unreadable or defaulted echo proves nothing."""
        reading = read_echo(order.http_port)
        if reading.unknown or not reading.ports or self.tag in reading.ports:
            return False
        return all(is_a_tag(port) for port in reading.ports)

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
    maybe: tuple[Order, ...] = ()  # live orders that may be ours (none proven): named, kept

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
    maybe: list[Order] = []
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
        if not order.expired and _maybe_ours(order, claim):
            maybe.append(order)
    if len(fits) > 1:
        ids = ", ".join(str(o.id) for o in fits)
        reasons.append(f"orders {ids} all fit the create: none can be proven ours")
        return Verdict(None, tuple(reasons), ambiguous=True, maybe=(*fits, *maybe))
    if fits:
        return Verdict(fits[0], tuple(reasons))
    return Verdict(None, tuple(reasons), ambiguous=bool(maybe), maybe=tuple(maybe))


def after_success(
    orders: Iterable[Order], claim: Claim, taken: Collection[int] = ()
) -> Order | None:
    """After a create the API answered as a success: the one live order on the server whose
    echoed image, currency and bid agree and that either echoes our tag and was stamped after
    our send (however late: what `ct` stamps is unknown), or, while the tag is not listed yet,
    was made in the create's window and shows no tag we can read as another create's. A
    server holds one renter at a time, so with our create accepted an order listed on it since
    then is ours; an order still listed from before (a cancel lagging) is outside the window.
    Only with the answer known may this be used: the run that got it, or a cleanup reading
    the ledger's `create-accepted` verdict (written as the answer came)."""
    low, high = claim.window()
    live = [
        o
        for o in orders
        if o.si == claim.server_id
        and o.id not in taken
        and not o.expired
        and claim._echo_mismatch(o) is None
    ]
    # Our tag on an order stamped after our send: the server had no other renter since our
    # accepted create, so it is ours however late `ct` stamps it (what it stamps is unknown).
    tagged = [o for o in live if claim.tag_matches(o) and (o.ct is None or low <= o.ct)]
    if len(tagged) == 1:
        return tagged[0]
    fits = [
        o
        for o in live
        if not claim.tag_matches(o)
        and not claim.another_tag(o)
        and o.ct is not None
        and low <= o.ct <= high
    ]
    return fits[0] if len(fits) == 1 and not tagged else None


def tagged_late(orders: Iterable[Order], claim: Claim, taken: Collection[int] = ()) -> Order | None:
    """While the run that sent a create (answered or not) still looks for its order, minutes
    at most after the send: the one live order on the server echoing our tag, stamped after
    our send however late, whose echoed image, currency and bid agree. What `ct` stamps is
    unknown (the create? the deploy?), and an order made after our send with our random tag
    is ours but for a 1-in-6,900 draw by a create racing ours on this very host. A cleanup,
    hours later, keeps to the window: there such an order is named, not taken."""
    low, _ = claim.window()
    tagged = [
        o
        for o in orders
        if o.si == claim.server_id
        and o.id not in taken
        and not o.expired
        and claim.tag_matches(o)
        and o.ct is not None
        and low <= o.ct
        and claim._echo_mismatch(o) is None
    ]
    return tagged[0] if len(tagged) == 1 else None


def _maybe_ours(order: Order, claim: Claim) -> bool:
    """An order that failed a check yet may be ours: it echoes our tag (whatever else is
    off), or shows none we can read as another create's and was stamped after our send (or
    says not when). What `ct` stamps is unknown (the create? the deploy?), so an order stamped
    a minute after our answer, its tag not listed yet or in a shape we cannot read, may well be
    ours: the window's end stretches by `LATE_STAMP_S` here. One stamped before our send
    cannot be ours."""
    if claim.tag_matches(order):
        return True
    if claim.another_tag(order):
        return False
    low, high = claim.window()
    return order.ct is None or low <= order.ct <= high + LATE_STAMP_S
