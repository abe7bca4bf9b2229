"""Lenient pydantic models of the Clore API's replies, in the shapes the API really sends.

Real replies carry more fields than any client knows and omit some that others assume, and the
`clore-ai` SDK crashed on real `my_orders` replies because it typed `pub_cluster` as a string and
`tcp_ports` as a dict. So: unknown fields are ignored, everything but identifiers is optional, and
validators accept the odd shapes seen in the wild. Prices here are exactly what the API sends:
PER DAY in the native currency. Conversion to USD per hour lives in `market.py` only.

Every string here is written by whoever lists a server or runs the API: it is made one safe
console line (`untrusted.console_line`, as `run` treats a server's output) as it is parsed, so
that no command or output channel can print a host's newline, control sequence or workflow
command. Host names, which must stay usable to connect, are kept only when they look like one.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from runner.untrusted import console_line


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _flatten_strings(value: Any) -> list[str]:
    """`[" RTX 3090", ["RTX 3090"]]` → `["RTX 3090", "RTX 3090"]`: spaces and nesting seen live."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _flatten_strings(item)]
    return [str(value).strip()]


def _one_line(value: str) -> str:
    return console_line(value).strip()


def _lines(value: Any) -> list[str]:
    """Listed names (GPUs, coins), each one safe line."""
    return [_one_line(s) for s in _flatten_strings(value)]


# A DNS name or an IP address (v6 in brackets or not): nothing a terminal or the runner reads.
_HOST = re.compile(r"[A-Za-z0-9.:\[\]_-]{1,253}")


def _hosts(value: Any) -> list[str]:
    """`pub_cluster`: host names to connect to; anything else is dropped, not repaired (a
    repaired name would connect somewhere else)."""
    return [s for s in _flatten_strings(value) if _HOST.fullmatch(s)]


def _as_text(value: Any) -> str | None:
    """`cuda_version` arrives as "13.0" or as 12.2; keep the text, as one safe line."""
    if value is None or value == "":
        return None
    return _one_line(str(value)) or None


def _to_float(value: Any) -> float | None:
    """Prices sometimes come as strings or null; non-numbers become None, not an error."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _price_map(value: Any) -> dict[str, float]:
    """`{"bitcoin": 4.4e-05, "CLORE-Blockchain": null}` → the numeric entries only."""
    if not isinstance(value, dict):
        return {}
    parsed = {_one_line(str(k)): _to_float(v) for k, v in value.items()}
    return {k: v for k, v in parsed.items() if v is not None}


def _port_list(value: Any) -> list[str]:
    """The SDK assumed `{"22": 1972}`; real replies are `["22:1972"]`. Accept both."""
    if isinstance(value, dict):
        return [f"{k}:{v}" for k, v in value.items()]
    return _flatten_strings(value)


def _echo_text(value: Any) -> str | None:
    """`http_port` as whatever the API sends it: "8080" (the one capture), 8080 (the official
    SDK's type), "8080/http", a list of them. Kept as one safe line, a list joined by commas,
    for the ownership check to read tolerantly (ownership.read_echo); nothing is dropped."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(_one_line(str(v)) for v in value) or None
    return _one_line(str(value)) or None


def _maybe_bool(value: Any) -> bool | None:
    """A flag whose absence is not "no": `spot` is missing from the on-demand capture, and no
    spot order was ever captured, so an absent `spot` says nothing about the order's type."""
    return None if value is None else _as_bool(value)


def _as_bool(value: Any) -> bool:
    """Flags arrive as true/false, 0/1 or null; null means "no"."""
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes"}
    return bool(value)


Flag = Annotated[bool, BeforeValidator(_as_bool)]
MaybeFlag = Annotated[bool | None, BeforeValidator(_maybe_bool)]
Echo = Annotated[str | None, BeforeValidator(_echo_text)]
Num = Annotated[float | None, BeforeValidator(_to_float)]
Text = Annotated[str | None, BeforeValidator(_as_text)]
Strings = Annotated[list[str], BeforeValidator(_lines)]
Hosts = Annotated[list[str], BeforeValidator(_hosts)]
Name = Annotated[str, AfterValidator(_one_line)]
PriceMap = Annotated[dict[str, float], BeforeValidator(_price_map)]
Ports = Annotated[list[str], BeforeValidator(_port_list)]


class UsdPrices(_Reply):
    """`price.usd`: USD-equivalents PER DAY of the native on-demand prices (`spot` is often 0)."""

    on_demand_btc: Num = None
    on_demand_clore: Num = None
    on_demand_usd: Num = None
    spot: Num = None


class Prices(_Reply):
    """`price`: per-day prices by currency ("bitcoin", "CLORE-Blockchain", "USD-Blockchain")."""

    on_demand: PriceMap = Field(default_factory=dict)
    spot: PriceMap = Field(default_factory=dict)  # the spot minimum, per day
    usd: UsdPrices | None = None


class NetSpecs(_Reply):
    cc: Text = None  # country code
    down: Num = None  # Mbps
    up: Num = None


class Specs(_Reply):
    gpu: Text = None  # "2x NVIDIA GeForce RTX 3090"
    gpuram: Num = None  # GB per GPU
    cpu: Text = None
    cpus: Text = None
    ram: Num = None
    disk: Text = None
    net: NetSpecs | None = None


class MarketServer(_Reply):
    """One entry of `GET /marketplace` `servers`."""

    id: int
    owner: int | None = None
    price: Prices = Field(default_factory=Prices)
    rented: Flag = False
    specs: Specs = Field(default_factory=Specs)
    reliability: Num = None
    allowed_coins: Strings = Field(default_factory=list)
    gpu_array: Strings = Field(default_factory=list)
    cuda_version: Text = None
    mrl: Num = None  # maximum rental length, in HOURS here (market.max_rental_s)
    online: bool | None = None  # in no captured marketplace entry


class Marketplace(_Reply):
    servers: list[MarketServer] = Field(default_factory=list)
    my_servers: list[int] = Field(default_factory=list)
    skipped: int = 0  # entries that did not parse (logged, never fatal)


class Order(_Reply):
    """One entry of `GET /my_orders` `orders`, as the API sends it. There is no status."""

    id: int
    si: int | None = None  # the SERVER id (what create_order called renting_server)
    price: Num = None  # PER DAY in `currency`
    currency: Text = None
    spend: Num = None  # accrued, in `currency`
    creation_fee: Num = None
    ct: Num = None  # creation time, unix seconds
    # When an ended order ended, unix seconds on the API's clock (as `ct`): listed on
    # completed orders (reference §9), whoever ended it, us or the host.
    order_end: Num = None
    mrl: Num = None  # the host's maximum rental length, in SECONDS here (not the market's hours)
    image: Text = None
    online: Flag = False
    # 0 or 1 while the container deploys (its image pulls), 2 once deployed (reference §9).
    mon_container: Num = None
    spot: MaybeFlag = None  # None: the reply has no `spot` key (the on-demand capture has none)
    expired: Flag = False
    pub_cluster: Hosts = Field(default_factory=list)
    tcp_ports: Ports = Field(default_factory=list)  # ["22:1972"]: container:public
    http_port: Echo = None  # our ownership tag, in whatever shape (see ownership.read_echo)
    http_pub: Text = None
    specs: Specs | None = None
    reliability: Num = None
    gpu_array: Strings = Field(default_factory=list)

    def public_port(self, container_port: int) -> int | None:
        """The public port mapped to `container_port`, from `tcp_ports` "container:public"."""
        for entry in self.tcp_ports:
            inner, _, outer = entry.partition(":")
            if inner.strip() == str(container_port) and outer.strip().isdigit():
                return int(outer)
        return None

    @property
    def ssh_endpoint(self) -> tuple[str, int] | None:
        """(host, port) for SSH once the order shows them: `pub_cluster[0]` and "22:P"."""
        port = self.public_port(22)
        if not self.pub_cluster or port is None:
            return None
        return self.pub_cluster[0], port

    @property
    def deploying(self) -> bool:
        """Online, its container still deploying: `mon_container` 0 or 1 (the image pulls).
        A host that got this far is alive; the pull is the image's time, not the host's."""
        return self.online and not self.expired and self.mon_container in (0, 1)

    @property
    def ready(self) -> bool:
        """Up as far as the API can tell: online, deployed (`mon_container` 2, or not said),
        its SSH endpoint shown. sshd may still refuse: probe it before use."""
        return (
            self.online
            and not self.expired
            and not self.deploying
            and self.ssh_endpoint is not None
        )


class Wallet(_Reply):
    name: Name
    deposit: Text = None
    balance: Num = None  # in the wallet's own unit; null for legacy wallets
    withdrawal_fee: Num = None


class SpotOffer(_Reply):
    offer_id: int | None = None
    bid: Num = None  # per day, in `currency`
    active: Flag = False
    my: Flag = False
    currency: Text = None


class SpotServer(_Reply):
    min_pricing: PriceMap = Field(default_factory=dict)  # per day, by currency
    mrl: Num = None
    visibility: Text = None
    online: bool | None = None


class SpotMarket(_Reply):
    """`GET /spot_marketplace?market=<id>`: the `market` object plus the top-level `exists`."""

    offers: list[SpotOffer] = Field(default_factory=list)
    server: SpotServer = Field(default_factory=SpotServer)
    currency_rates_in_usd: PriceMap = Field(default_factory=dict)
    exists: bool = True


class _FeeBase(_Reply):
    base: PriceMap = Field(default_factory=dict)  # a fraction by currency: 0.05 is 5 %


class _FeesByType(_Reply):
    on_demand: _FeeBase = Field(default_factory=_FeeBase)
    spot: _FeeBase = Field(default_factory=_FeeBase)


class _CreationFees(_Reply):
    on_demand: PriceMap = Field(default_factory=dict)  # native amount by currency
    spot: PriceMap = Field(default_factory=dict)


class RenterFees(_Reply):
    """`GET /renter_fees`: this account's share of the base fee, and the creation fees."""

    renter_fees: _FeesByType = Field(default_factory=_FeesByType)
    creation_fees: _CreationFees = Field(default_factory=_CreationFees)

    def fee_rate(self, spot: bool, currency: str) -> float | None:
        fees = self.renter_fees.spot if spot else self.renter_fees.on_demand
        return fees.base.get(currency)

    def creation_fee_native(self, spot: bool, currency: str) -> float | None:
        fees = self.creation_fees.spot if spot else self.creation_fees.on_demand
        return fees.get(currency)
