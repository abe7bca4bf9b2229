"""`clore-run doctor --canary --capture FILE`: what the market really answered, and whether each
assumption clore-run's money rests on held (reference/clore-api.md §9: where the evidence is
thin).

From before the create until after the cancel, `my_orders` is read every few seconds with
`return_completed=true` (a thread of its own, on the client's limiter), and every `my_orders`
reply the canary's own steps get is kept too: each is written to FILE as one JSON line (the
canary's server's orders only, secrets redacted), with the time since the create and the
canary's phase. Then each assumption is judged against them: held, contradicted, or not seen
(the replies never showed it). A person reads the table; the weekly workflow uploads FILE.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from runner.backends.base import BackendStage
from runner.backends.clore.api import CloreClient
from runner.backends.clore.errors import CloreApiError
from runner.backends.clore.ownership import LISTING_LAG_S, read_echo
from runner.clock import Clock
from runner.untrusted import console_line

POLL_S = 4.0  # between the watcher's own looks (the limiter spaces every call by 1.1 s)
PROGRESS_S = 5.0  # a progress line at most this often: never minutes of silence
SPEND_TOLERANCE = 0.25  # spend within 25 % (or one minute's worth) of price x time: held
# Keys whose values are never written, whatever the API puts in them.
_SECRET_KEY = re.compile(r"pass|token|secret|auto_login|ssh_key|env|auth", re.IGNORECASE)

State = Literal["held", "contradicted", "not seen"]
Json = dict[str, Any]


@dataclass(frozen=True)
class Look:
    """One `my_orders` reply: when (our clock), in which phase, and the canary server's orders
    as sent (redacted)."""

    t: float
    phase: str
    completed: bool
    orders: tuple[Json, ...]


@dataclass(frozen=True)
class Finding:
    assumption: str
    state: State
    evidence: str


@dataclass
class CreateFacts:
    """What the canary's create was: filled in as it becomes known (the ledger's marks)."""

    server_id: int
    image: str
    spot: bool
    tag: int | None = None
    sent_at: float | None = None
    answered_at: float | None = None
    order_id: int | None = None
    ssh_at: float | None = None  # SSH answered (our clock)
    cancel_at: float | None = None  # the cancel was sent


@dataclass
class Capture:
    """Keeps every `my_orders` reply (the client's `on_reply`), writes it to `out` as a JSON
    line, hears the canary's phases (a StageSink) and says progress every few seconds."""

    facts: CreateFacts
    clock: Clock
    say: Callable[[str], None]
    out: TextIO | None = None
    looks: list[Look] = field(default_factory=list)
    phase: str = "renting"
    t0: float | None = None  # our clock when the canary began (None: the first reply's)
    _said_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- hearing -------------------------------------------------------------------------

    def on_reply(self, endpoint: str, params: Mapping[str, str] | None, reply: Json) -> None:
        if endpoint != "my_orders":
            return
        raw = reply.get("orders")
        orders = raw if isinstance(raw, list) else []
        mine = tuple(
            redact(o) for o in orders if isinstance(o, dict) and o.get("si") == self.facts.server_id
        )
        completed = (params or {}).get("return_completed") == "true"
        now = self.clock.time()
        with self._lock:
            look = Look(now, self.phase, completed, mine)
            self.looks.append(look)
            if self.out is not None:
                line = {"t_s": round(self._since(now), 3), "phase": look.phase}
                line |= {"return_completed": completed, "orders": list(mine)}
                line |= {"other_orders": len(orders) - len(mine)}
                self.out.write(json.dumps(line, sort_keys=True) + "\n")
                self.out.flush()
            due = self._said_at is None or now - self._said_at >= PROGRESS_S
            if due:
                self._said_at = now
        if due:
            self.say(self._progress(look))

    def stage(
        self, stage: BackendStage, detail: str = "", usd_per_hour: float | None = None
    ) -> None:
        self.enter(stage)

    def note(self, text: str) -> None:
        return None

    def enter(self, phase: str) -> None:
        with self._lock:
            self.phase = phase

    # -- words ---------------------------------------------------------------------------

    def _since(self, now: float) -> float:
        if self.t0 is None:
            self.t0 = now
        return now - self.t0

    def _progress(self, look: Look) -> str:
        when = f"+{self._since(look.t):.0f} s"
        if not look.orders:
            return f"canary: {when} {look.phase}: my_orders lists no order on the server yet"
        order = look.orders[-1]
        parts = [
            f"order {order.get('id')}",
            f"online {order.get('online')}",
            f"mon_container {order.get('mon_container', 'absent')}",
            f"http_port {order.get('http_port', 'absent')!r}",
        ]
        if order.get("expired"):
            parts.append("expired")
        return f"canary: {when} {look.phase}: " + ", ".join(console_line(p) for p in parts)


def redact(order: Json) -> Json:
    """An order as the API sent it, without anything that could be a secret."""
    out: Json = {}
    for key, value in order.items():
        out[str(key)] = "***" if _SECRET_KEY.search(str(key)) else value
    return out


class Watcher:
    """Reads `my_orders` with `return_completed=true` every `every_s` (real seconds) on a
    thread, until stopped; a failing read is tried again at the next beat."""

    def __init__(self, client: CloreClient, every_s: float = POLL_S) -> None:
        self._client = client
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="canary-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            look(self._client)
            self._stop.wait(self._every_s)


def look(client: CloreClient) -> bool:
    """One read with `return_completed=true` (the capture hears it); False if it failed."""
    try:
        client.my_orders(return_completed=True)
    except CloreApiError:
        return False
    return True


# -- the assumptions -------------------------------------------------------------------------


def judge(capture: Capture) -> list[Finding]:
    """Each assumption against what the replies showed."""
    facts = capture.facts
    seen = [(look, o) for look in capture.looks for o in look.orders if _is_ours(o, facts)]
    return [
        _tag_shape(seen, facts),
        _tag_when(seen, facts),
        _ct(seen, facts),
        _spot(seen, facts),
        _image(seen, facts),
        _mon_container(seen, facts),
        _online_vs_ssh(seen, facts),
        _spend(seen, facts),
        _after_cancel(capture, facts),
        _order_end(seen, facts),
    ]


Seen = list[tuple[Look, Json]]


def _is_ours(order: Json, facts: CreateFacts) -> bool:
    return facts.order_id is not None and order.get("id") == facts.order_id


def _tag_shape(seen: Seen, facts: CreateFacts) -> Finding:
    name = "tag echo: http_port is the tag as sent, a string"
    echoes = [o.get("http_port") for _, o in seen if o.get("http_port") not in (None, "", [])]
    if not echoes or facts.tag is None:
        return Finding(name, "not seen", "no reply showed an http_port")
    shapes = sorted({repr(e) for e in echoes})
    if all(e == str(facts.tag) for e in echoes):
        return Finding(name, "held", f"{echoes[0]!r} for tag {facts.tag}")
    readable = all(facts.tag in read_echo(_echo_text(e)).ports for e in echoes)
    how = "read tolerantly" if readable else "NOT readable as our tag"
    return Finding(name, "contradicted", f"shown as {', '.join(shapes)[:120]} ({how})")


def _echo_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _tag_when(seen: Seen, facts: CreateFacts) -> Finding:
    name = "tag echo: listed while the container deploys"
    deploying = [o for _, o in seen if not o.get("online") or _mon(o) not in (None, 2)]
    if not deploying:
        return Finding(name, "not seen", "no reply caught the order deploying")
    first = next((look.t for look, o in seen if o.get("http_port")), None)
    shown = [o for o in deploying if o.get("http_port")]
    since = (
        "" if first is None or facts.sent_at is None else f"; first +{first - facts.sent_at:.0f} s"
    )
    if shown:
        return Finding(name, "held", f"{len(shown)} of {len(deploying)} deploying looks{since}")
    return Finding(name, "contradicted", f"absent in {len(deploying)} deploying looks{since}")


def _ct(seen: Seen, facts: CreateFacts) -> Finding:
    name = "ct: within the create's window (send .. answer + 15 s)"
    stamps = [float(o["ct"]) for _, o in seen if isinstance(o.get("ct"), (int, float))]
    if not stamps or facts.sent_at is None or facts.answered_at is None:
        return Finding(name, "not seen", "no ct shown")
    ct = min(stamps)
    after = ct - facts.answered_at
    text = f"ct - answer = {after:+.0f} s (ct - send {ct - facts.sent_at:+.0f} s; our clock)"
    if facts.sent_at - 31.0 <= ct <= facts.answered_at + LISTING_LAG_S + 30.0:
        return Finding(name, "held", text)
    return Finding(name, "contradicted", text)


def _spot(seen: Seen, facts: CreateFacts) -> Finding:
    name = "spot: echoed on a spot order" if facts.spot else "spot: an on-demand order's echo"
    if not seen:
        return Finding(name, "not seen", "the order was never listed")
    values = {o["spot"] for _, o in seen if "spot" in o}
    if not values:
        state: State = "contradicted" if facts.spot else "held"
        return Finding(name, state, "no `spot` key")
    right = values == {facts.spot} or values == {int(facts.spot)}
    return Finding(name, "held" if right else "contradicted", f"spot = {sorted(values)}")


def _image(seen: Seen, facts: CreateFacts) -> Finding:
    name = "image: echoed as sent"
    images = {o.get("image") for _, o in seen if o.get("image")}
    if not images:
        return Finding(name, "not seen", "no image shown")
    if images == {facts.image}:
        return Finding(name, "held", facts.image)
    return Finding(name, "contradicted", f"sent {facts.image!r}, shown {sorted(map(str, images))}")


def _mon(order: Json) -> int | None:
    value = order.get("mon_container")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mon_container(seen: Seen, facts: CreateFacts) -> Finding:
    name = "mon_container: 0/1 while deploying, then 2, never back"
    values = [_mon(o) for look, o in seen if facts.cancel_at is None or look.t <= facts.cancel_at]
    steps = [v for i, v in enumerate(values) if v is not None and (i == 0 or values[i - 1] != v)]
    if not steps:
        return Finding(name, "not seen", "no mon_container shown")
    text = " -> ".join(map(str, steps))
    backwards = any(b < a for a, b in itertools.pairwise(steps))
    if backwards or any(v not in (0, 1, 2) for v in steps):
        return Finding(name, "contradicted", text)
    return Finding(name, "held", text)


def _online_vs_ssh(seen: Seen, facts: CreateFacts) -> Finding:
    name = "online: true before SSH answers"
    if facts.ssh_at is None:
        return Finding(name, "not seen", "SSH never answered")
    online = [look.t for look, o in seen if o.get("online")]
    before = [look.t for look, _ in seen if look.t <= facts.ssh_at]
    if not before:
        return Finding(name, "not seen", "no look before SSH answered")
    if online and min(online) <= facts.ssh_at:
        return Finding(name, "held", f"online {facts.ssh_at - min(online):.0f} s before SSH")
    return Finding(name, "contradicted", "SSH answered while my_orders said online: false")


def _spend(seen: Seen, facts: CreateFacts) -> Finding:
    name = "spend: price x time since ct"
    live = [(look, o) for look, o in seen if not o.get("expired")]
    usable = [
        (look, o)
        for look, o in live
        if all(isinstance(o.get(k), (int, float)) for k in ("spend", "price", "ct"))
    ]
    if not usable or facts.sent_at is None or facts.answered_at is None:
        return Finding(name, "not seen", "no live order with spend, price and ct")
    look, order = usable[-1]
    # Our clock against the API's: the create's answer bounds it (ct is stamped near it).
    age_s = look.t - facts.answered_at + (facts.answered_at - float(order["ct"]))
    expected = float(order["price"]) * max(age_s, 0.0) / 86400.0
    spend = float(order["spend"])
    minute = float(order["price"]) / 1440.0
    text = f"spend {spend:.6g} vs {expected:.6g} expected after {age_s:.0f} s"
    if abs(spend - expected) <= max(SPEND_TOLERANCE * expected, minute):
        return Finding(name, "held", text)
    return Finding(name, "contradicted", text)


def _after_cancel(capture: Capture, facts: CreateFacts) -> Finding:
    name = "after its cancel: gone from the live list, listed as expired"
    if facts.cancel_at is None or facts.order_id is None:
        return Finding(name, "not seen", "no cancel was sent")
    after = [look for look in capture.looks if look.t > facts.cancel_at]
    if not after:
        return Finding(name, "not seen", "no look after the cancel")
    ours = [(look, o) for look in after for o in look.orders if o.get("id") == facts.order_id]
    live = [look for look, o in ours if not o.get("expired")]
    expired = [look for look, o in ours if o.get("expired")]
    last_live = max((look.t for look in live), default=None)
    lag = "" if last_live is None else f"; listed live {last_live - facts.cancel_at:.0f} s after"
    if expired:
        return Finding(name, "held", f"expired: true in {len(expired)} looks{lag}")
    if any(look.completed for look in after):
        return Finding(name, "contradicted", f"not listed as expired with return_completed{lag}")
    return Finding(name, "not seen", f"no look with return_completed after the cancel{lag}")


def _order_end(seen: Seen, facts: CreateFacts) -> Finding:
    name = "order_end: on the ended order, at its cancel"
    ends = [o.get("order_end") for _, o in seen if o.get("expired")]
    stamps = [float(v) for v in ends if isinstance(v, (int, float))]
    if not stamps or facts.cancel_at is None or facts.answered_at is None:
        why = "no ended order carried order_end" if ends else "the order never showed as ended"
        return Finding(name, "not seen", why)
    ct = next((float(o["ct"]) for _, o in seen if isinstance(o.get("ct"), (int, float))), None)
    # order_end - ct against cancel - answer: both intervals on one clock each.
    if ct is None:
        return Finding(name, "not seen", "no ct to measure order_end from")
    lived_api, lived_ours = stamps[-1] - ct, facts.cancel_at - facts.answered_at
    text = f"order_end - ct = {lived_api:.0f} s; cancel - answer = {lived_ours:.0f} s"
    ok = abs(lived_api - lived_ours) <= LISTING_LAG_S + 30.0
    return Finding(name, "held" if ok else "contradicted", text)


def table(findings: list[Finding]) -> list[str]:
    """The findings as aligned lines: assumption, state, evidence."""
    width = max(len(f.assumption) for f in findings)
    lines = [f"{'assumption'.ljust(width)}  {'':12}  evidence"]
    for f in findings:
        evidence = console_line(f.evidence)[:160]
        lines.append(f"{f.assumption.ljust(width)}  {f.state:12}  {evidence}")
    return lines


def open_capture(path: Path) -> TextIO:
    """The capture file, made fresh (its folder too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", encoding="utf-8")
