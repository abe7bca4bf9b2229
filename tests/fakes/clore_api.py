"""A stateful fake of the Clore.ai API on pytest-httpserver, replaying the real reply shapes,
HTTP statuses and error codes of reference/clore-api.md.

What it models:
- a marketplace of realistic servers (`SAMPLE_SERVERS`, shapes and values from the reference);
- orders: `create_order` answers a bare `{"code": 0}`; the order shows in `my_orders`
  `appear_after_s` later and goes online `online_after_s` after creation, only then carrying
  `pub_cluster`/`tcp_ports` (host and port configurable: a later test points them at a real sshd);
  `cancel_order` ends it (and, with `cancel_lag_s`, it stays listed as live that long);
  spend accrues per second at the price/day of the moment, and not while the order is outbid;
- billing as Clore bills (`billed`): the wallet loses spend x (1 + the renter's fee rate), plus
  the order's creation fee only when it lived 10 minutes or more; the rates are what
  `renter_fees` answers (`renter_fee_rates`, `creation_fees`);
- sshd answers only where Clore runs one: `cloreai/` images, or any image created with
  `autossh_entrypoint: true`; other orders still map "22:P", but nothing listens on P;
- the spot book: `rival_bids` per server, shown by `spot_marketplace`; a spot order at or under
  a rival's bid is outbid: the reference says the rental then ends with no notice and stops
  billing, and the UI shows it as "Outbid", so here it stays listed, offline, without connection
  fields and without accruing, until `set_spot_price` raises it over the rivals and it is back
  online (a fresh container: `outbid_now` also runs `on_container_stop`, where a test kills the
  sshd the jobs run under);
- the API's own rules: currency-not-allowed (HTTP 500), server-already-rented (HTTP 200),
  not_enough_balance, too_low_price, spot lowering rules, invalid token (code 3);
- its rate limits (1 request/s, 1 create/5 s): a faster request gets 429 + code 5 and is listed
  in `violations`;
- injected faults (`fail_next`), e.g. HTTP 500 + code 1 that still created the order;
- hosts that fail as real ones do: `never_online` servers, `no_sshd` servers; and hosts
  slower or quicker to boot than the rest (`online_after_s_by_server`);
- hosts that misbehave later (for the randomized fault suite, tests/chaos/): `sshd_late_s`
  whose sshd answers that long after the order is online, `preempt_after_s` whose spot orders
  the server side ends (preemption) or outbids that long after creation (`tick()` applies
  them; every request does too);
- a slow API: `reply_delay_s` per endpoint (the request is served, the answer leaves late), and
  a cached marketplace: `market_lag_s` (a server rented that recently is still shown free);
- echo shapes the evidence leaves open (reference §9), keyword options whose defaults are the
  capture's: `tag_echo` (the HTTP port, our ownership tag, as sent, as an integer, as
  "PORT/http", as a list, absent until the order is deployed, or as an object no client
  reads), `echo_spot=False` (no `spot`
  key, as in the on-demand capture), `ct_late_s` (`ct` stamped that long after the create);
- the container's deploy phase (reference §9), keyword options whose defaults keep an order
  deployed the moment it is online: `pull_s` (and `pull_s_by_image`, `pull_s_by_server`,
  `pull_s_by_server_image`) is how long an order's image pulls once it is online, while
  `my_orders` shows `mon_container` 0 then 1 and no `pub_cluster`/`tcp_ports`; deployed, it
  shows 2 and the connection fields. `caches_images`: a host that deployed an image once
  deploys it again at once (its cache holds it);
- orders that end by themselves (reference §9), keyword options whose defaults keep today's
  fake (no maximum enforced, nothing ends on its own, no `order_end`): `mrl_hours_by_server`
  is a host's maximum rental length, listed on the marketplace in hours and in `my_orders` in
  seconds (the units of the captures), and an order there ends (expires) once it has lived
  that long; `ends_after_s` ends any order on a host that long after its creation, with a
  reason ("host-gone", "preempted", ...); `echo_order_end` lists an ended order's `order_end`
  (unix seconds) and `completed_spend=False` drops `spend` from ended orders (what a settlement
  must then do without). `ended_by_itself` records each order so ended, with why;
  `whole_second_stamps=False` sends `ct` and `order_end` as floats (a market on compressed time);
- callers: a client whose URL is `url_for_caller(NAME)` (a path prefix before /v1) is recorded as
  NAME on its requests and on the orders its creates made (`FakeOrder.creator`), so a test can
  tell which of two processes on one key created and cancelled what.

Time is a `FakeClock` (tests/fakes/fake_clock.py) shared with the client under test, so nothing
waits real seconds.
Every request is recorded with its fake time.
"""

from __future__ import annotations

import copy
import json
import random
import re
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response
from werkzeug.serving import WSGIRequestHandler

from runner.backends.clore.api import CloreClient, RetryPolicy
from runner.backends.clore.ratelimit import RateLimiter
from tests.fakes.fake_clock import FakeClock

API_KEY = "fake-key-5f0c2e9a7b31d4e8"
Json = dict[str, Any]
# The shapes `my_orders` may show an order's HTTP port in (`FakeClore.tag_echo`): only the
# first was ever captured (reference §9); the others are what a client must survive.
TAG_ECHOES = ("as-sent", "integer", "port/http", "list", "absent-until-deployed", "unknown")


@dataclass(frozen=True)
class Fault:
    """A canned reply: HTTP status, body (a dict is sent as JSON), and whether the create it
    answers still happens (the API's opaque code 1 sometimes did)."""

    status: int
    body: Json | str
    creates_order: bool = False
    headers: tuple[tuple[str, str], ...] = ()


class Faults:
    """Faults with the statuses the reference captured (the rest: HTTP 200, as documented)."""

    RATE_LIMITED = Fault(429, {"code": 5})
    CURRENCY_NOT_ALLOWED = Fault(500, {"code": 6, "error": "currency-not-allowed"})
    SERVER_ALREADY_RENTED = Fault(200, {"code": 6, "error": "server-already-rented"})
    DB_ERROR = Fault(500, {"code": 1})
    DB_ERROR_BUT_CREATED = Fault(500, {"code": 1}, creates_order=True)
    BAD_GATEWAY = Fault(
        502,
        "<html><head><title>502 Bad Gateway</title></head><body>"
        "<center><h1>502 Bad Gateway</h1></center><hr><center>cloudflare</center></body></html>",
    )
    NOT_ENOUGH_BALANCE = Fault(200, {"code": 6, "error": "not_enough_balance"})
    TOO_LOW_PRICE = Fault(200, {"code": 6, "error": "too_low_price"})
    SERVER_OFFLINE = Fault(200, {"code": 6, "error": "server-offline"})
    EXCEEDED_MAX_STEP = Fault(200, {"code": 6, "error": "exceeded_max_step", "max_step": 0.5})
    CANNOT_LOWER_YET = Fault(
        200, {"code": 6, "error": "can_lower_every_600_seconds", "time_to_lowering": 412}
    )
    UNKNOWN_APP_ERROR = Fault(200, {"code": 6, "error": "gpu-on-fire"})
    INVALID_INPUT = Fault(200, {"code": 2})
    INVALID_TOKEN = Fault(200, {"code": 3})
    INVALID_ENDPOINT = Fault(404, {"code": 4})
    UNKNOWN_CODE = Fault(200, {"code": 42})


def _prices(usd_per_day: float, spot_usd_per_day: float, clore_usd: float = 0.0027055) -> Json:
    """A `price` block quoting the same USD value in all three currencies (per day)."""
    btc_usd = 68022.87

    def native(usd: float) -> Json:
        return {
            "bitcoin": round(usd / btc_usd, 10),
            "CLORE-Blockchain": round(usd / clore_usd, 2),
            "USD-Blockchain": usd,
        }

    return {
        "on_demand": native(usd_per_day),
        "spot": native(spot_usd_per_day),
        "usd": {
            "on_demand_btc": usd_per_day,
            "on_demand_clore": usd_per_day,
            "on_demand_usd": usd_per_day,
            "spot": 0,
        },
    }


def _specs(gpu: str, gpuram: float, cc: str | None) -> Json:
    specs: Json = {
        "mb": "TUF GAMING B650-PLUS WIFI",
        "cpu": "AMD Ryzen 9 7950X 16-Core Processor",
        "cpus": "16/32",
        "ram": 31.8111,
        "disk": "KINGSTON SNV2S500G 394.1GB",
        "disk_speed": 1857.97,
        "gpu": gpu,
        "gpuram": gpuram,
        "backend_version": 21,
        "pcie_rev": 4,
        "pcie_width": 16,
        "pl": [450],
    }
    if cc is not None:
        specs["net"] = {"cc": cc, "down": 875.58, "up": 866.4, "test_history": []}
    return specs


ALL_COINS = ["bitcoin", "CLORE-Blockchain", "USD-Blockchain"]

SAMPLE_SERVERS: list[Json] = [
    {
        # The reference's sample server, verbatim where it is consistent: 3 USD/day = 0.125 $/h.
        "id": 99173,
        "owner": 24169,
        "autoprice": "usd",
        "mrl": 720,
        "price": {
            "on_demand": {"bitcoin": 0.0000441, "CLORE-Blockchain": 1108.85, "USD-Blockchain": 3},
            "spot": {"bitcoin": 0.0000441, "CLORE-Blockchain": 1108.85, "USD-Blockchain": 3},
            "usd": {"on_demand_btc": 3.0, "on_demand_clore": 3.0, "on_demand_usd": 3, "spot": 0},
            "original_usd": {"CLORE-Blockchain": {"on_demand": 3, "spot": 3}},
        },
        "rented": False,
        "specs": _specs("1x NVIDIA GeForce RTX 4090", 23, "NO"),
        "reliability": 0.9964,
        "allowed_coins": ALL_COINS,
        "rating": {"avg": 4.64, "cnt": 44},
        "gpu_array": [" RTX 4090"],
        "gigaspot": True,
        "oc": True,
        "cuda_version": "13.0",
    },
    {
        # The captured order's server: 2 USD-Blockchain/day (0.0833 $/h).
        "id": 88028,
        "owner": 2288,
        "mrl": 720,
        "price": _prices(2.0, 1.5),
        "rented": False,
        "specs": _specs("1x NVIDIA GeForce RTX 3090", 24, "US"),
        "reliability": 1,
        "allowed_coins": ALL_COINS,
        "rating": {"avg": 4.64, "cnt": 44},
        "gpu_array": [" RTX 3090"],
        "cuda_version": "13.0",
    },
    {
        "id": 100201,
        "owner": 3001,
        "mrl": 73,
        "price": _prices(4.8, 3.6),  # 0.2 $/h for two GPUs
        "rented": False,
        "specs": _specs("2x NVIDIA GeForce RTX 3090", 24, "DE"),
        "reliability": 0.95,
        "allowed_coins": ["bitcoin", "CLORE-Blockchain"],
        "gpu_array": [" RTX 3090", " RTX 3090"],
        "cuda_version": "12.4",
    },
    {
        "id": 100302,
        "owner": 3002,
        "mrl": 720,
        "price": _prices(48.0, 36.0),  # 2 $/h
        "rented": False,
        "specs": _specs("4x NVIDIA A100-SXM4-80GB", 80, "US"),
        "reliability": 0.999,
        "allowed_coins": ALL_COINS,
        "gpu_array": ["A100-SXM4-80GB"] * 4,
        "cuda_version": 12.2,  # a number, not a string: tolerated
    },
    {
        "id": 100403,
        "owner": 3003,
        "price": _prices(2.4, 1.2),  # the cheapest 4090, but taken
        "rented": True,
        "specs": _specs("1x NVIDIA GeForce RTX 4090", 24, "FI"),
        "reliability": 0.99,
        "allowed_coins": ALL_COINS,
        "gpu_array": [" RTX 4090"],
        "cuda_version": "12.8",
    },
    {
        # The incident host (reference §2.2): USD quote 1.61/day, CLORE quote worth 4.0 USD/day;
        # it lists USD-Blockchain but the fake refuses it, as the real one did.
        "id": 100504,
        "owner": 3004,
        "price": {
            "on_demand": {"CLORE-Blockchain": 1478.47, "USD-Blockchain": 1.61},
            "spot": {"CLORE-Blockchain": 1108.85, "USD-Blockchain": 1.2},
            "usd": {"on_demand_clore": 4.0, "on_demand_usd": 1.61, "spot": 0},
        },
        "rented": False,
        "specs": _specs("1x NVIDIA GeForce RTX 3080", 10, "CA"),
        "reliability": 0.97,
        "allowed_coins": ["CLORE-Blockchain", "USD-Blockchain"],
        "gpu_array": [" RTX 3080"],
        "cuda_version": "12.4",
    },
    {
        # Sparse and odd: mixed GPUs, nested gpu_array, no net/cuda/rating/allowed_coins.
        "id": 100605,
        "price": {"on_demand": {"CLORE-Blockchain": 3000.0}, "spot": {}},
        "rented": False,
        "specs": {"gpu": "6x Mixed GPUs", "gpuram": 11},
        "reliability": 0.8,
        "gpu_array": [[" RTX 3090"], " RTX 2080 Ti", " RTX 2080 Ti"],
    },
    {
        "id": 100706,
        "owner": 3006,
        "price": _prices(1.3, 0.78),  # 0.054 $/h, but reliability 0.6
        "rented": False,
        "specs": _specs("1x NVIDIA GeForce RTX 3060", 12, "PL"),
        "reliability": 0.6,
        "allowed_coins": ALL_COINS,
        "gpu_array": [" RTX 3060"],
        "cuda_version": "12.2",
    },
]


@dataclass
class FakeOrder:
    id: int
    server_id: int
    currency: str
    price_per_day: float
    spot: bool
    image: str
    created_unix: float
    ports: dict[str, str]
    ssh_key: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    creation_fee: float = 0.1
    ended_unix: float | None = None
    last_lowered_unix: float | None = None
    autossh: bool = False  # created with autossh_entrypoint: Clore runs sshd
    accrued: float = 0.0  # spend (native) up to `accrued_until`
    accrued_until: float | None = None  # unix; None: the creation time
    creator: str = ""  # the caller whose create made it (`FakeClore.url_for_caller`)
    cancelled_by: str | None = None  # the caller whose cancel ended it; None: not a cancel
    pull_s: float = 0.0  # its image's pull once online (`FakeClore.pull_s`): deploying till then

    @property
    def live(self) -> bool:
        return self.ended_unix is None


@dataclass(frozen=True)
class Recorded:
    """One request as the fake saw it, at fake (monotonic) time `t`."""

    t: float
    method: str
    endpoint: str
    query: dict[str, str]
    body: Any
    auth: str | None
    status: int
    code: int | None
    caller: str = ""  # the URL prefix the client used (`FakeClore.url_for_caller`)


class FakeClore:
    """The fake API. Mutate `servers`, `balances`, `refused_currencies` or the timing knobs
    freely between calls; tests read `orders`, `requests` and `violations`."""

    MIN_GAP_S = 1.0  # the API's own limits (the client's targets are stricter)
    CREATE_GAP_S = 5.0

    def __init__(
        self,
        server: HTTPServer,
        clock: FakeClock,
        *,
        api_key: str = API_KEY,
        servers: list[Json] | None = None,
        tag_echo: str = "as-sent",
        echo_spot: bool = True,
        ct_late_s: float = 0.0,
        pull_s: float = 0.0,
        pull_s_by_image: dict[str, float] | None = None,
        pull_s_by_server: dict[int, float] | None = None,
        caches_images: bool = False,
        mrl_hours_by_server: dict[int, float] | None = None,
        ends_after_s: dict[int, tuple[float, str]] | None = None,
        echo_order_end: bool = False,
        completed_spend: bool = True,
        whole_second_stamps: bool = True,
    ) -> None:
        if tag_echo not in TAG_ECHOES:
            raise ValueError(f"tag_echo {tag_echo!r}: one of {', '.join(TAG_ECHOES)}")
        self.server = server
        self.clock = clock
        self.api_key = api_key
        self.servers: dict[int, Json] = {
            s["id"]: s for s in copy.deepcopy(servers if servers is not None else SAMPLE_SERVERS)
        }
        self.balances = {"bitcoin": 0.01, "CLORE-Blockchain": 200000.0, "USD-Blockchain": 100.0}
        self.refused_currencies: dict[int, set[str]] = {100504: {"USD-Blockchain"}}
        self.appear_after_s = 3.0
        self.online_after_s = 30.0
        self.tag_only_online = False  # True: http_port (our tag) listed only once online
        # How `my_orders` shows an order's HTTP port (our ownership tag), one of TAG_ECHOES:
        # the capture's string as sent ("54321"), an integer, "54321/http", a one-item list,
        # or (as sent) only once the order is deployed. The evidence has only the first.
        self.tag_echo = tag_echo
        self.echo_spot = echo_spot  # False: no `spot` key at all, as in the on-demand capture
        self.ct_late_s = ct_late_s  # `ct` stamps the order this long after it was made
        # The deploy phase: how long an order's image pulls once it is online, fixed when the
        # order is made: by (server, image), else by image, else by server, else `pull_s`.
        self.pull_s = pull_s
        self.pull_s_by_image: dict[str, float] = dict(pull_s_by_image or {})
        self.pull_s_by_server: dict[int, float] = dict(pull_s_by_server or {})
        self.pull_s_by_server_image: dict[tuple[int, str], float] = {}
        self.caches_images = caches_images  # a host deploys an image it deployed before at once
        self.cached_images: set[tuple[int, str]] = set()  # (server, image) deployed so far
        # Orders that end by themselves (see the module's doc): by server id.
        self.mrl_hours_by_server: dict[int, float] = dict(mrl_hours_by_server or {})
        self.ends_after_s: dict[int, tuple[float, str]] = dict(ends_after_s or {})
        self.echo_order_end = echo_order_end
        self.completed_spend = completed_spend
        self.ended_by_itself: dict[int, str] = {}  # order id -> why it ended on its own
        # `ct` and `order_end` in whole seconds, as the API sends them; False: as floats, for
        # a market on compressed time (the fault suite's orders live seconds, not hours, and
        # a whole second there is what twenty minutes would be to a real order).
        self.whole_second_stamps = whole_second_stamps
        self.ssh_host = "n1.us.clorecloud.net"
        self.ssh_port: int | None = None  # None: a port derived from the order id
        self.enforce_rate_limits = True
        # The API's clock minus the client's: its `ct` stamps and its `Date` header use it.
        self.api_clock_ahead_s = 0.0
        self.cancel_lag_s = 0.0  # a cancelled order stays listed as live this long
        # Hosts that fail the way real ones most often do (reference §8): orders on
        # `never_online` servers never come online; orders on `no_sshd` servers come online
        # with port 22 mapped where nothing answers.
        self.never_online: set[int] = set()
        self.no_sshd: set[int] = set()
        self.online_after_s_by_server: dict[int, float] = {}  # else `online_after_s`
        # The renter's share of the base fee (a fraction) and the creation fee (native), by
        # order type and currency, as `renter_fees` answers them.
        self.renter_fee_rates: dict[str, dict[str, float]] = {
            "on_demand": dict.fromkeys(ALL_COINS, 0.05),
            "spot": dict.fromkeys(ALL_COINS, 0.0125),
        }
        self.creation_fees: dict[str, dict[str, float]] = {
            kind: {"bitcoin": 0.0000015, "CLORE-Blockchain": 37.0, "USD-Blockchain": 0.1}
            for kind in ("on_demand", "spot")
        }
        self.rival_bids: dict[int, list[tuple[float, str]]] = defaultdict(list)
        self.raise_max_step: float | None = None  # raising is unrestricted in the reference
        self.after_create: Callable[[FakeOrder], None] | None = None
        # Misbehaving hosts, by server id (see the module's doc).
        self.sshd_late_s: dict[int, float] = {}
        self.preempt_after_s: dict[int, tuple[float, str]] = {}  # (seconds, "end" | "outbid")
        self.preempted: set[int] = set()  # orders `tick` has preempted or outbid
        # Where an order's sshd listens, when each host has one of its own (None: `ssh_port`).
        self.port_for: Callable[[FakeOrder], int | None] | None = None
        # A slow API, by endpoint: the reply leaves this long after the request was served
        # (a create has rented by then). Needs a threaded server, or everything waits.
        self.reply_delay_s: dict[str, float] = {}
        # The marketplace shows a server rented only this long after its order was made (a
        # cached listing): two runs can both see it free, and the later create is refused.
        self.market_lag_s = 0.0
        self._caller = ""
        self.on_container_stop: Callable[[FakeOrder], None] | None = None
        # Called (under the fake's lock: it must not call the fake) when an order ends for
        # any reason: what stopping its container means to a test (kill what runs "there").
        self.on_order_end: Callable[[FakeOrder], None] | None = None
        self._no_sshd_port: int | None = None
        self.orders: dict[int, FakeOrder] = {}
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self._faults: dict[str, deque[Fault]] = defaultdict(deque)
        self._next_id = 1939941
        self._lock = threading.Lock()

    # --- test API --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url_for("/v1")

    def install(self) -> FakeClore:
        self.server.expect_request(_PATH).respond_with_handler(self._handle)
        return self

    def url_for_caller(self, name: str) -> str:
        """The API's URL for one caller: its requests and creates are recorded as `name`."""
        assert re.fullmatch(r"[A-Za-z0-9_-]+", name), name
        return self.server.url_for(f"/{name}/v1")

    def tick(self) -> None:
        """Apply what the hosts do on their own by now (`preempt_after_s`, spot orders only,
        once each): a test on a real clock calls it from a thread, so a preemption comes when
        due, request or not."""
        stopped = []
        with self._lock:
            now = self.api_time()
            stopped += self._end_by_themselves(now)
            for order in self.live_orders():
                due = self.preempt_after_s.get(order.server_id)
                if due is None or not order.spot or order.id in self.preempted:
                    continue
                if now < order.created_unix + due[0]:
                    continue
                self.preempted.add(order.id)
                if due[1] == "outbid":
                    self._accrue(order)
                    rival = order.price_per_day * 1.5
                    self.rival_bids[order.server_id].append((rival, order.currency))
                else:
                    self._end(order)
                stopped.append(order)
        for order in stopped:
            if self.on_container_stop is not None:
                self.on_container_stop(order)

    def _end_by_themselves(self, now: float) -> list[FakeOrder]:
        """End the orders whose host's maximum rental length has passed (expired), or whose
        host ends them (`ends_after_s`), each at the moment it was due."""
        ended = []
        for order in self.live_orders():
            due = self.self_end_due(order)
            if due is not None and now >= due[0]:
                self._end(order, at=due[0])
                self.ended_by_itself[order.id] = due[1]
                ended.append(order)
        return ended

    def self_end_due(self, order: FakeOrder) -> tuple[float, str] | None:
        """When (API unix seconds) and why `order` ends by itself, if it does."""
        dues = []
        hours = self.mrl_hours_by_server.get(order.server_id)
        if hours is not None:
            dues.append((order.created_unix + hours * 3600.0, "expired"))
        host = self.ends_after_s.get(order.server_id)
        if host is not None:
            dues.append((order.created_unix + host[0], host[1]))
        return min(dues) if dues else None

    def date_header(self, _handler: object = None, timestamp: float | None = None) -> str:
        """The `Date` header as this fake's API clock shows it: the client measures its clock
        offset from it, so it must be the fake clock's time, not the machine's. Install it as
        `WSGIRequestHandler.date_time_string`."""
        return formatdate(self.api_time(), usegmt=True)

    def client(self, **kwargs: Any) -> CloreClient:
        """A client wired to this fake: its own limiter on the fake clock, seeded jitter."""
        kwargs.setdefault("limiter", RateLimiter(self.clock))
        kwargs.setdefault("rng", random.Random(4))
        kwargs.setdefault("retry", RetryPolicy())
        return CloreClient(kwargs.pop("api_key", self.api_key), base_url=self.url, **kwargs)

    def fail_next(self, endpoint: str, fault: Fault, times: int = 1) -> None:
        """Answer the next `times` calls to `endpoint` with `fault` (after the auth check)."""
        self._faults[endpoint].extend([fault] * times)

    def clear_faults(self) -> None:
        """Forget every fault `fail_next` queued and not yet answered."""
        with self._lock:
            self._faults.clear()

    def calls(self, endpoint: str) -> list[Recorded]:
        return [r for r in self.requests if r.endpoint == endpoint]

    def api_time(self) -> float:
        """The API's own unix clock (`ct`, `Date`): the test's clock plus the set offset."""
        return self.clock.time() + self.api_clock_ahead_s

    def live_orders(self) -> list[FakeOrder]:
        return [o for o in self.orders.values() if o.live]

    def add_order(
        self,
        server_id: int,
        *,
        age_s: float,
        currency: str = "USD-Blockchain",
        image: str = "old",
        tag: int | None = None,
    ) -> int:
        """An order that already exists (created `age_s` ago), e.g. a leftover of a dead run.
        `tag`: the HTTP port its create asked for (what clore-run's creates carry as proof)."""
        body: Json = {"currency": currency, "image": image}
        if tag is not None:
            body["ports"] = {"22": "tcp", str(tag): "http"}
        with self._lock:
            order = self._new_order(server_id, body, False)
            order.created_unix -= age_s
            return order.id

    def end_order(self, order_id: int) -> None:
        """The server side ends an order (spot outbid, host gone)."""
        with self._lock:
            self._end(self.orders[order_id])

    def outbid_now(self, order_id: int, factor: float = 1.02) -> float:
        """A rival bids `factor` times the order's bid: the order is outbid from now, its
        container stops (`on_container_stop`). Returns the rival's bid."""
        with self._lock:
            order = self.orders[order_id]
            self._accrue(order)  # billed up to now at the bid that held the server
            bid = order.price_per_day * factor
            self.rival_bids[order.server_id].append((bid, order.currency))
        if self.on_container_stop is not None:
            self.on_container_stop(order)
        return bid

    def spend(self, order_id: int) -> float:
        """What `my_orders` reports as `spend`: the listed price alone, for the time held and
        not outbid, each stretch at the bid of its time."""
        order = self.orders[order_id]
        return order.accrued + self._open_spend(order)

    def _open_spend(self, order: FakeOrder) -> float:
        start = order.accrued_until if order.accrued_until is not None else order.created_unix
        end = order.ended_unix if order.ended_unix is not None else self.api_time()
        if end <= start or self.outbid(order):
            return 0.0
        return order.price_per_day * (end - start) / 86400

    def _accrue(self, order: FakeOrder) -> None:
        """Fold the spend so far into `accrued`: before a price or outbid change, so that each
        stretch is billed as it was."""
        order.accrued += self._open_spend(order)
        end = order.ended_unix if order.ended_unix is not None else self.api_time()
        start = order.accrued_until if order.accrued_until is not None else order.created_unix
        order.accrued_until = max(start, end)

    def lived_s(self, order_id: int) -> float:
        order = self.orders[order_id]
        end = order.ended_unix if order.ended_unix is not None else self.api_time()
        return max(0.0, end - order.created_unix)

    def fee_rate(self, order: FakeOrder) -> float:
        return self.renter_fee_rates["spot" if order.spot else "on_demand"].get(order.currency, 0)

    def billed(self, order_id: int) -> float:
        """What the wallet loses for the order (native): spend plus the renter's fee, plus the
        creation fee once the order has lived 10 minutes."""
        order = self.orders[order_id]
        fee = order.creation_fee if self.lived_s(order_id) >= 600 else 0.0
        return self.spend(order_id) * (1 + self.fee_rate(order)) + fee

    def outbid(self, order: FakeOrder) -> bool:
        """A spot order at or under a rival's bid in its currency has lost the server."""
        rivals = [bid for bid, cur in self.rival_bids[order.server_id] if cur == order.currency]
        return order.spot and any(bid >= order.price_per_day for bid in rivals)

    def listed_live(self, order: FakeOrder, now_unix: float) -> bool:
        """Still listed as live: not ended, or ended less than `cancel_lag_s` ago."""
        return order.ended_unix is None or now_unix < order.ended_unix + self.cancel_lag_s

    def pull_for(self, server_id: int, image: str) -> float:
        """How long `image` pulls on `server_id` once an order there is online."""
        if self.caches_images and (server_id, image) in self.cached_images:
            return 0.0
        for pull in (
            self.pull_s_by_server_image.get((server_id, image)),
            self.pull_s_by_image.get(image),
            self.pull_s_by_server.get(server_id),
        ):
            if pull is not None:
                return pull
        return self.pull_s

    def online_at(self, order: FakeOrder) -> float:
        """When the order comes online (if its host ever does): its container deploys then."""
        boot = self.online_after_s_by_server.get(order.server_id, self.online_after_s)
        return order.created_unix + boot

    def deployed_at(self, order: FakeOrder) -> float:
        """When its container is deployed (`mon_container` 2, the connection fields shown)."""
        return self.online_at(order) + order.pull_s

    def runs_sshd(self, order: FakeOrder) -> bool:
        if order.server_id in self.no_sshd:
            return False
        return order.image.startswith("cloreai/") or order.autossh

    @property
    def no_sshd_port(self) -> int:
        """A loopback port nobody listens on: where an order without sshd maps port 22."""
        if self._no_sshd_port is None:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self._no_sshd_port = probe.getsockname()[1]
        return self._no_sshd_port

    # --- dispatch --------------------------------------------------------------------------

    def _handle(self, request: Request) -> Response:
        if self.preempt_after_s or self.mrl_hours_by_server or self.ends_after_s:
            self.tick()
        with self._lock:
            match = _PATH.match(request.path)
            self._caller = (match.group("caller") or "") if match else ""
            endpoint = match.group("endpoint").strip("/") if match else ""
            body = request.get_json(silent=True) if request.method == "POST" else None
            for order in self.orders.values():
                self._accrue(order)  # a test may have changed the book since the last call
            status, reply, headers = self._reply(endpoint, request, body)
            code = reply.get("code") if isinstance(reply, dict) else None
            self.requests.append(
                Recorded(
                    t=self.clock.now(),
                    method=request.method,
                    endpoint=endpoint,
                    query=dict(request.args),
                    body=body,
                    auth=request.headers.get("auth"),
                    status=status,
                    code=code,
                    caller=self._caller,
                )
            )
        delay = self.reply_delay_s.get(endpoint, 0.0)
        if delay > 0:
            self.clock.sleep(delay)
        if isinstance(reply, str):
            return Response(reply, status, headers, content_type="text/html")
        return Response(json.dumps(reply), status, headers, content_type="application/json")

    def _reply(
        self, endpoint: str, request: Request, body: Any
    ) -> tuple[int, Json | str, dict[str, str]]:
        """Injected faults come after the auth and rate checks, as the real service's would."""
        authorised = request.headers.get("auth") == self.api_key
        if authorised and not self._rate_limited(endpoint) and self._faults[endpoint]:
            fault = self._faults[endpoint].popleft()
            if fault.creates_order and isinstance(body, dict):
                self._create(body)
            return fault.status, fault.body, dict(fault.headers)
        status, reply = self._dispatch(endpoint, request, body)
        return status, reply, {}

    def _dispatch(self, endpoint: str, request: Request, body: Any) -> tuple[int, Json | str]:
        if request.headers.get("auth") != self.api_key:
            return 200, {"code": 3}
        limited = self._rate_limited(endpoint)
        if limited:
            self.violations.append(limited)
            return 429, {"code": 5}
        handler = self._handlers().get(endpoint)
        if handler is None:
            return 404, {"code": 4}
        return handler(request, body)

    def _handlers(self) -> dict[str, Callable[[Request, Any], tuple[int, Json]]]:
        return {
            "marketplace": self._marketplace,
            "my_orders": self._my_orders,
            "wallets": self._wallets,
            "spot_marketplace": self._spot_marketplace,
            "create_order": lambda _r, body: self._create(body),
            "cancel_order": lambda _r, body: self._cancel(body),
            "set_spot_price": lambda _r, body: self._set_spot_price(body),
            "renter_fees": self._renter_fees,
        }

    def _rate_limited(self, endpoint: str) -> str | None:
        if not self.enforce_rate_limits:
            return None
        now = self.clock.now()
        if self.requests and now - self.requests[-1].t < self.MIN_GAP_S:
            return f"{endpoint} at t={now:.2f}: {now - self.requests[-1].t:.2f} s after last call"
        creates = self.calls("create_order")
        if endpoint == "create_order" and creates and now - creates[-1].t < self.CREATE_GAP_S:
            return f"create_order at t={now:.2f}: {now - creates[-1].t:.2f} s after last create"
        return None

    # --- endpoints -------------------------------------------------------------------------

    def _marketplace(self, _request: Request, _body: Any) -> tuple[int, Json]:
        servers = list(self.servers.values())
        if self.mrl_hours_by_server:
            mrl = self.mrl_hours_by_server
            servers = [{**s, "mrl": mrl[s["id"]]} if s["id"] in mrl else s for s in servers]
        if self.market_lag_s > 0:  # a cached listing: an order this young is not shown yet
            now = self.api_time()
            young = {
                o.server_id for o in self.live_orders() if now - o.created_unix < self.market_lag_s
            }
            servers = [{**s, "rented": False} if s["id"] in young else s for s in servers]
        return 200, {"servers": servers, "my_servers": [], "code": 0}

    def _wallets(self, _request: Request, _body: Any) -> tuple[int, Json]:
        wallets = [
            {"name": name, "deposit": f"dep-{name}", "balance": bal, "withdrawal_fee": 0.0001}
            for name, bal in self.balances.items()
        ]
        return 200, {"wallets": wallets, "code": 0}

    def _my_orders(self, request: Request, _body: Any) -> tuple[int, Json]:
        completed = request.args.get("return_completed") == "true"
        now = self.api_time()
        shown = [
            self._order_json(o, now)
            for o in self.orders.values()
            if now >= o.created_unix + self.appear_after_s
            and (self.listed_live(o, now) or completed)
        ]
        return 200, {"orders": shown, "limit": 16, "code": 0}

    def _spot_marketplace(self, request: Request, _body: Any) -> tuple[int, Json]:
        server = self.servers.get(int(request.args.get("market", "0") or 0))
        if server is None:
            return 200, {"exists": False, "code": 0}
        bids = [
            {"offer_id": o.id, "bid": o.price_per_day, "active": True, "my": True}
            | {"currency": o.currency}
            for o in self.live_orders()
            if o.server_id == server["id"] and o.spot
        ]
        bids += [
            {"offer_id": 900000 + i, "bid": bid, "active": True, "my": False, "currency": cur}
            for i, (bid, cur) in enumerate(self.rival_bids[server["id"]])
        ]
        market = {
            "offers": bids,
            "server": {
                "min_pricing": server["price"].get("spot", {}),
                "mrl": 2520000,
                "visibility": "public",
                "online": True,
            },
            "currency_rates_in_usd": {
                "bitcoin": 68022.87,
                "CLORE-Blockchain": 0.0027055,
                "USD-Blockchain": 1,
            },
        }
        return 200, {"market": market, "exists": True, "code": 0}

    def _renter_fees(self, _request: Request, _body: Any) -> tuple[int, Json]:
        return 200, {
            "renter_fees": {k: {"base": dict(v)} for k, v in self.renter_fee_rates.items()},
            "poh_config": {"max_reduction_percent": 50, "max_poh_amount": 1000000},
            "creation_fees": {k: dict(v) for k, v in self.creation_fees.items()},
            "poh_balance": 0,
            "code": 0,
        }

    def _create(self, body: Any) -> tuple[int, Json]:
        if not isinstance(body, dict) or not isinstance(body.get("renting_server"), int):
            return 200, {"code": 2}
        server = self.servers.get(body["renting_server"])
        currency = body.get("currency")
        kind = body.get("type")
        if server is None or kind not in ("on-demand", "spot") or not body.get("image"):
            return 200, {"code": 2}
        allowed = set(server.get("allowed_coins", [])) - self.refused_currencies.get(
            server["id"], set()
        )
        if currency not in allowed:
            return 500, {"code": 6, "error": "currency-not-allowed"}
        if server.get("rented"):
            return 200, {"code": 6, "error": "server-already-rented"}
        spot = kind == "spot"
        prices = server["price"]["spot" if spot else "on_demand"]
        minimum = prices.get(currency) or 0
        if spot and float(body.get("spotprice") or 0) < minimum:
            return 200, {"code": 6, "error": "too_low_price"}
        price = float(body["spotprice"]) if spot else minimum
        kind_key = "spot" if spot else "on_demand"
        fee = self.creation_fees[kind_key].get(str(currency), 0.0)
        rate = self.renter_fee_rates[kind_key].get(str(currency), 0.0)
        if self.balances.get(str(currency), 0) < fee + price * (1 + rate) / 24:
            return 200, {"code": 6, "error": "not_enough_balance"}
        order = self._new_order(server["id"], body, spot, price)
        if self.after_create is not None:
            self.after_create(order)
        return 200, {"code": 0}

    def _new_order(
        self, server_id: int, body: Json, spot: bool, price: float | None = None
    ) -> FakeOrder:
        server = self.servers[server_id]
        currency = body.get("currency", "USD-Blockchain")
        if price is None:
            price = server["price"]["on_demand"].get(currency, 1.0)
        order = FakeOrder(
            id=self._next_id,
            server_id=server_id,
            currency=currency,
            price_per_day=price,
            spot=spot,
            image=body.get("image", ""),
            created_unix=self.api_time(),
            ports=dict(body.get("ports") or {}),
            ssh_key=body.get("ssh_key"),
            env=dict(body.get("env") or {}),
            creation_fee=self.creation_fees["spot" if spot else "on_demand"].get(currency, 0.1),
            autossh=body.get("autossh_entrypoint") is True and bool(body.get("ssh_key")),
            creator=self._caller,
        )
        order.pull_s = self.pull_for(server_id, order.image)
        self._next_id += 1
        self.orders[order.id] = order
        server["rented"] = True
        return order

    def _cancel(self, body: Any) -> tuple[int, Json]:
        order = self._order_in(body, "id")
        if order is None or not order.live:
            return 200, {"code": 2}
        self._end(order)
        order.cancelled_by = self._caller
        return 200, {"code": 0}

    def _order_in(self, body: Any, key: str) -> FakeOrder | None:
        order_id = body.get(key) if isinstance(body, dict) else None
        return self.orders.get(order_id) if isinstance(order_id, int) else None

    def _end(self, order: FakeOrder, at: float | None = None) -> None:
        """End `order` now, or at `at` (API unix seconds, not later than now: an order that
        ended by itself between two looks is billed up to its end, not to the look)."""
        order.ended_unix = self.api_time() if at is None else min(at, self.api_time())
        self._accrue(order)
        self.balances[order.currency] -= self.billed(order.id)
        self.servers[order.server_id]["rented"] = False
        if self.on_order_end is not None:
            self.on_order_end(order)

    def _set_spot_price(self, body: Any) -> tuple[int, Json]:
        order = self._order_in(body, "order_id")
        desired = body.get("desired_price") if isinstance(body, dict) else None
        if order is None or not order.live or not order.spot or not desired:
            return 200, {"code": 2}
        minimum = self.servers[order.server_id]["price"]["spot"].get(order.currency, 0)
        now = self.api_time()
        if desired < minimum:
            return 200, {"code": 6, "error": "too_low_price"}
        step = self.raise_max_step
        if step is not None and desired - order.price_per_day > step + 1e-9:
            return 200, {"code": 6, "error": "exceeded_max_step", "max_step": step}
        if desired < order.price_per_day:
            last = order.last_lowered_unix
            if last is not None and now - last < 600:
                wait = round(600 - (now - last))
                error = {"error": "can_lower_every_600_seconds", "time_to_lowering": wait}
                return 200, {"code": 6, **error}
            max_step = order.price_per_day * 0.03  # [UNCONFIRMED] the real step is unknown
            if order.price_per_day - desired > max_step:
                return 200, {"code": 6, "error": "exceeded_max_step", "max_step": max_step}
            order.last_lowered_unix = now
        self._accrue(order)
        order.price_per_day = float(desired)
        return 200, {"code": 0}

    def _stamp(self, unix: float) -> float:
        return int(unix) if self.whole_second_stamps else unix

    def _order_json(self, order: FakeOrder, now: float) -> Json:
        server = self.servers[order.server_id]
        reply: Json = {
            "id": order.id,
            "creation_fee": order.creation_fee,
            "price": order.price_per_day,
            "mrl": int(self.mrl_hours_by_server.get(order.server_id, 168.0) * 3600),
            "image": order.image,
            "currency": order.currency,
            "spend": self.spend(order.id),
            "ct": self._stamp(order.created_unix + self.ct_late_s),
            "specs": server.get("specs", {}),
            "si": order.server_id,
            "mon_container": 0,
            "online": self.listed_live(order, now)
            and now >= self.online_at(order)
            and order.server_id not in self.never_online
            and not self.outbid(order),
            "spot": order.spot,
            "rating": server.get("rating", {"avg": 0, "cnt": 0}),
            "reliability": server.get("reliability"),
            "owner": server.get("owner"),
            "cuda_version": server.get("cuda_version"),
            "gpu_array": server.get("gpu_array", []),
        }
        deployed = reply["online"] and now >= self.deployed_at(order)
        if deployed:
            reply["mon_container"] = 2
            self.cached_images.add((order.server_id, order.image))
        elif reply["online"]:  # deploying: 0, then 1 for the second half of its pull
            reply["mon_container"] = int(now >= self.online_at(order) + order.pull_s / 2)
        http = [p for p, kind in order.ports.items() if kind == "http"]
        late = self.tag_only_online or self.tag_echo == "absent-until-deployed"
        if http and (deployed or not late):
            # The container port of the order's one HTTP port, a string (the capture's, of an
            # order online: whether a booting order lists it is unconfirmed, hence the knob).
            reply["http_port"] = _echoed_port(http[0], self.tag_echo)
        if not self.echo_spot:
            del reply["spot"]
        if deployed:
            # Connection fields exist only once the order is deployed (absent before:
            # tolerated).
            reply["pub_cluster"] = [self.ssh_host]
            own = self.port_for(order) if self.port_for is not None else None
            port = own or self.ssh_port or 1000 + order.id % 50000
            late = self.sshd_late_s.get(order.server_id)
            if not self.runs_sshd(order) or (late and now < self.deployed_at(order) + late):
                port = self.no_sshd_port  # mapped all the same, but nothing answers there
            tcp = sorted((p for p, kind in order.ports.items() if kind == "tcp"), key=_ssh_first)
            reply["tcp_ports"] = [f"{p}:{port + i}" for i, p in enumerate(tcp)]
        if not self.listed_live(order, now):
            reply["expired"] = True
            if self.echo_order_end and order.ended_unix is not None:
                reply["order_end"] = self._stamp(order.ended_unix)
            if not self.completed_spend:
                del reply["spend"]
        return reply


_PATH = re.compile(r"^(?:/(?P<caller>[A-Za-z0-9_-]+))?/v1/(?P<endpoint>.*)$")


def _echoed_port(port: str, shape: str) -> Any:
    """The HTTP port as `my_orders` shows it in echo `shape` (see `FakeClore.tag_echo`)."""
    if shape == "integer":
        return int(port)
    if shape == "port/http":
        return f"{port}/http"
    if shape == "list":
        return [port]
    if shape == "unknown":  # a shape no client reads: an object
        return {"container": port, "kind": "http"}
    return port


def _ssh_first(port: str) -> tuple[bool, str]:
    return (port != "22", port)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_clore(
    httpserver: HTTPServer, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeClore]:
    """The fake API, installed on the test's httpserver; `fake_clore.client()` talks to it.
    Its replies' `Date` header shows the API's clock, as the real one's does (the HTTP server
    stamps it; here from the fake clock, not real time)."""
    fake = FakeClore(httpserver, fake_clock)
    monkeypatch.setattr(WSGIRequestHandler, "date_time_string", fake.date_header)
    yield fake.install()
