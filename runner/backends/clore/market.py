"""Offer choice, pure: marketplace servers → priced offers → the ones that fit a job, best first.

Units: the API quotes PER DAY in a native currency (bitcoin, CLORE-Blockchain, USD-Blockchain);
jobs cap prices in USD PER HOUR for the whole server. Variables say which: `*_price_per_day` is
native per day, `*_usd_per_hour` is USD per hour. Per-day becomes per-hour only in `per_hour`,
and the inverse, for turning a job's cap into a bid, only in `per_day`.

Every `*_usd_per_hour` here includes the renter's fee, which Clore bills on top of the listed
price: that is what the user pays, so it is what is shown, ranked, capped and budgeted. The
`*_price_per_day` figures are the listed ones, as the API takes them in orders and bids.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runner.backends.clore import bill
from runner.backends.clore.models import MarketServer
from runner.core import hosts, money
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk

HOURS_PER_DAY = money.HOURS_PER_DAY
_USD_FIELD = {
    "bitcoin": "on_demand_btc",
    "CLORE-Blockchain": "on_demand_clore",
    "USD-Blockchain": "on_demand_usd",
}
_GPU_SPEC = re.compile(r"^\s*(\d+)\s*[xX×]\s*(.+?)\s*$")
RELIABILITY_FLOOR = 0.01  # keeps `usd_per_hour / reliability` finite for 0 or unknown
SPOT_MARGIN = 0.05  # bid this much above the price to beat, so the first rival does not win


def per_hour(price_per_day: float) -> float:
    """Per-day quote to per-hour: the conversion itself lives in `runner.core.money`."""
    return money.per_hour_from_per_day(price_per_day)


def per_day(price_per_hour: float) -> float:
    """The inverse of `per_hour`, for turning a per-hour cap into a per-day bid limit."""
    return money.per_day_from_per_hour(price_per_hour)


# The marketplace's `mrl` is the host's maximum rental length in HOURS (the official
# server_config table; listings show 72-720, Clore's own pages 6-3000 h), while `my_orders` and
# the spot market's server show seconds (604800, 2520000). A marketplace figure above a year
# of hours is read as seconds: of two readings, the shorter passes over a host at worst, the
# longer would rent one that ends under the job.
_MRL_HOURS_AT_MOST = 24 * 365


def max_rental_s(mrl: float | None) -> float | None:
    """A marketplace entry's `mrl` in seconds (None, 0 or negative: no maximum known)."""
    if mrl is None or mrl <= 0:
        return None
    if mrl > _MRL_HOURS_AT_MOST:
        return float(mrl)
    return float(mrl) * money.SECONDS_PER_HOUR


@dataclass(frozen=True)
class Offer:
    """A marketplace server priced in one order currency."""

    server_id: int
    gpu_model: str
    gpu_count: int
    vram_gb: float | None  # per GPU
    currency: str  # what the order would be paid in
    on_demand_price_per_day: float | None  # native currency
    spot_min_price_per_day: float | None  # native currency: the lowest bid the host takes
    usd_per_unit: float | None  # USD for one unit of `currency`, by the server's own quotes
    on_demand_usd_per_hour: float | None  # renter's fee included
    spot_usd_per_hour: float | None  # at the spot minimum, renter's fee included
    allowed_currencies: tuple[str, ...]
    reliability: float | None  # 0..1
    rented: bool
    cuda_version: str | None
    location: str | None  # country code
    on_demand_fee_rate: float = bill.DOCUMENTED_ON_DEMAND_FEE_RATE
    spot_fee_rate: float = bill.DOCUMENTED_SPOT_FEE_RATE
    max_rental_s: float | None = None  # the host's maximum rental length (None: unknown)

    def fee_rate(self, spot: bool) -> float:
        return self.spot_fee_rate if spot else self.on_demand_fee_rate

    def usd_per_hour(self, spot: bool) -> float | None:
        return self.spot_usd_per_hour if spot else self.on_demand_usd_per_hour

    @property
    def gpus(self) -> str:
        return f"{self.gpu_count}x {self.gpu_model}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"allowed_currencies": list(self.allowed_currencies)}


@dataclass(frozen=True)
class NearMiss:
    """An offer that does not fit an ask, and every reason why."""

    offer: Offer
    reasons: tuple[str, ...]


def parse_gpu(spec: str | None, gpu_array: Iterable[str] = ()) -> tuple[str, int]:
    """(model, count) from `specs.gpu` ("2x NVIDIA GeForce RTX 3090"), else from `gpu_array`.

    "6x Mixed GPUs" stays "Mixed GPUs": the count of any one type in it is unknown.
    """
    names = [n.strip() for n in gpu_array if n.strip()]
    match = _GPU_SPEC.match(spec or "")
    if match:
        return match.group(2), int(match.group(1))
    if spec and spec.strip():
        return spec.strip(), max(1, len(names))
    if names:
        return Counter(names).most_common(1)[0][0], len(names)
    return "unknown GPU", 0


def usd_per_unit(
    server: MarketServer, currency: str, fallback_rates: Mapping[str, float] | None = None
) -> float | None:
    """USD per unit of `currency` from the server's own quotes (`price.usd.on_demand_*` over the
    native on-demand price): the USD and CLORE quotes of one host can disagree, so the currency
    actually paid decides. Falls back to `fallback_rates` (spot_marketplace's
    `currency_rates_in_usd`), then to 1 for USD-Blockchain."""
    native = server.price.on_demand.get(currency)
    usd_field = _USD_FIELD.get(currency)
    usd = getattr(server.price.usd, usd_field) if server.price.usd and usd_field else None
    if native and native > 0 and usd and usd > 0:
        return float(usd) / native
    if fallback_rates and fallback_rates.get(currency):
        return fallback_rates[currency]
    return 1.0 if currency == "USD-Blockchain" else None


def _usd_per_hour(price_per_day: float | None, rate: float | None, fee_rate: float) -> float | None:
    if price_per_day is None or price_per_day <= 0 or rate is None:
        return None  # 0 or missing: not offered in this currency
    return bill.with_fee_per_hour(per_hour(price_per_day * rate), fee_rate)


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def offer_from_server(
    server: MarketServer,
    currency: str,
    fallback_rates: Mapping[str, float] | None = None,
    fees: bill.RenterFeeRates = bill.DOCUMENTED_RATES,
) -> Offer:
    """Price one marketplace server for orders paid in `currency`, the renter's fee included."""
    model, count = parse_gpu(server.specs.gpu, server.gpu_array)
    rate = usd_per_unit(server, currency, fallback_rates)
    on_demand = _positive(server.price.on_demand.get(currency))
    spot = _positive(server.price.spot.get(currency))
    # A missing `allowed_coins` is read as "the currencies it quotes": the best evidence left.
    allowed = tuple(server.allowed_coins) or tuple(server.price.on_demand)
    return Offer(
        server_id=server.id,
        gpu_model=model,
        gpu_count=count,
        vram_gb=server.specs.gpuram,
        currency=currency,
        on_demand_price_per_day=on_demand,
        spot_min_price_per_day=spot,
        usd_per_unit=rate,
        on_demand_usd_per_hour=_usd_per_hour(on_demand, rate, fees.on_demand_fee_rate),
        spot_usd_per_hour=_usd_per_hour(spot, rate, fees.spot_fee_rate),
        allowed_currencies=allowed,
        reliability=server.reliability,
        rented=server.rented,
        cuda_version=server.cuda_version,
        location=server.specs.net.cc if server.specs.net else None,
        on_demand_fee_rate=fees.on_demand_fee_rate,
        spot_fee_rate=fees.spot_fee_rate,
        max_rental_s=max_rental_s(server.mrl),
    )


def offers_from_servers(
    servers: Iterable[MarketServer],
    currency: str,
    fallback_rates: Mapping[str, float] | None = None,
    fees: bill.RenterFeeRates = bill.DOCUMENTED_RATES,
) -> list[Offer]:
    return [offer_from_server(s, currency, fallback_rates, fees) for s in servers]


def misses(offer: Offer, ask: GpuAsk, excluded: Collection[int] = ()) -> tuple[str, ...]:
    """Every reason `offer` does not fit `ask` (empty: it fits). Counts are "at least"."""
    return tuple(reason for _, reason in _failed_checks(offer, ask, excluded))


# How far a miss puts an offer from the ask, for `closest_offers`: other hardware is further
# away than a price, a currency or a rented flag, which change from day to day.
_WRONG_GPU, _TOO_SMALL, _SOFT = 100, 10, 1


def _failed_checks(offer: Offer, ask: GpuAsk, excluded: Collection[int]) -> list[tuple[int, str]]:
    price = offer.usd_per_hour(ask.spot)
    kind = "spot" if ask.spot else "on-demand"
    cap = ask.max_usd_per_hour
    checks = [
        (offer.server_id in excluded, _SOFT, "host excluded for this run"),
        (offer.rented, _SOFT, "already rented"),
        (
            offer.currency not in offer.allowed_currencies,
            _SOFT,
            f"does not take {offer.currency} (takes {', '.join(offer.allowed_currencies)})",
        ),
        (
            bool(ask.type) and (ask.type or "").lower() not in offer.gpu_model.lower(),
            _WRONG_GPU,
            f"GPU {offer.gpu_model!r} does not match {ask.type!r}",
        ),
        (
            offer.gpu_count < ask.count,
            _TOO_SMALL,
            f"{offer.gpu_count} GPU(s), {ask.count} needed",
        ),
        (
            ask.min_vram_gb > 0 and (offer.vram_gb or 0) < ask.min_vram_gb,
            _TOO_SMALL,
            f"{_gb(offer.vram_gb)} VRAM per GPU, {ask.min_vram_gb:g} GB needed",
        ),
        (price is None, _SOFT, f"no {kind} price in {offer.currency}"),
        (
            price is not None and cap is not None and price > cap,
            _SOFT,
            f"{kind} {price or 0:.3f} $/h over the {cap or 0:.3f} $/h cap",
        ),
        (
            ask.min_reliability is not None and (offer.reliability or 0) < ask.min_reliability,
            _SOFT,
            f"reliability {_pct(offer.reliability)} under {_pct(ask.min_reliability)}",
        ),
    ]
    return [(weight, reason) for failed, weight, reason in checks if failed]


def rank_key(offer: Offer, spot: bool = False) -> tuple[float, float, float, int]:
    """Sort key, best first: expected cost per *reliable* hour, `usd_per_hour / reliability`.

    Why: a host of reliability r delivers on average r of each paid hour (the rest is lost to
    failures and reruns), so reliability is worth exactly its share of the price. A 1-point gap
    is worth about 1 %: 0.300 $/h at 0.99 (0.303) beats 0.295 $/h at 0.95 (0.311), while 0.25
    $/h at 0.95 (0.263) beats 0.30 $/h at 0.99. Equal expected cost: the lower raw price, then
    the higher reliability, then the lower server id (deterministic). Unknown reliability counts
    as 0 (last among equals in price); unknown price sorts after every priced offer.
    """
    price = offer.usd_per_hour(spot)
    reliability = offer.reliability or 0.0
    if price is None:
        return (math.inf, math.inf, -reliability, offer.server_id)
    return (price / max(reliability, RELIABILITY_FLOOR), price, -reliability, offer.server_id)


def expected_rank_key(
    offer: Offer,
    spot: bool,
    memory: HostMemory,
    given_up_after_s: float,
    images: Sequence[str] = (),
) -> tuple[float, float, float, int]:
    """`rank_key` with the host history in: the price per reliable hour becomes the expected
    cost per reliable hour, the price plus the host's chance of a failed boot (its record
    weighed against the market's) times what such a boot costs (the wait at its price, and
    the creation fee if the wait passes the grace), and the expected pull of the run's
    `images` on it as time. What a person would pick knowing the history: a host that failed
    half its boots loses to a slightly dearer one that never did, and a host whose cache holds
    the image to one priced alike that must pull it for minutes."""
    price = offer.usd_per_hour(spot)
    reliability = offer.reliability or 0.0
    if price is None:
        return (math.inf, math.inf, -reliability, offer.server_id)
    fee_usd = bill.FALLBACK_CREATION_FEE_USD
    chance = memory.fail_chance(str(offer.server_id))
    expected = hosts.expected_usd_per_hour(
        price, fee_usd, chance, given_up_after_s, bill.CREATION_FEE_GRACE_S
    )
    if images:
        pull_s = memory.expected_pull_s(images, str(offer.server_id))
        expected = hosts.with_pull_usd_per_hour(expected, price, pull_s)
    return (expected / max(reliability, RELIABILITY_FLOOR), price, -reliability, offer.server_id)


def skipped_ids(memory: HostMemory | None) -> dict[int, str]:
    """Server ids the history says to skip now, with why."""
    if memory is None:
        return {}
    return {int(h): why for h, why in memory.skipped().items() if h.isdigit()}


def matching_offers(
    offers: Iterable[Offer],
    ask: GpuAsk,
    excluded: Collection[int] = (),
    memory: HostMemory | None = None,
    given_up_after_s: float = bill.DEFAULT_BOOT_BOUND_S,
    images: Sequence[str] = (),
) -> list[Offer]:
    """The offers that fit `ask`, best first (see `rank_key`). With the host `memory`: hosts
    it says to skip are left out, and the rest rank by expected cost (`expected_rank_key`)."""
    offers = list(offers)
    skip = skipped_ids(memory)
    fitting = [o for o in offers if not misses(o, ask, {*excluded, *skip})]
    if not fitting and skip:
        # The history is advice: it never leaves nothing to rent. A history that says every
        # fitting host failed lately is as likely poisoned (a cache a pull request wrote) as
        # true, and the hosts still rank by their record below.
        fitting = [o for o in offers if not misses(o, ask, excluded)]
    if memory is None:
        return sorted(fitting, key=lambda o: rank_key(o, ask.spot))
    return sorted(
        fitting, key=lambda o: expected_rank_key(o, ask.spot, memory, given_up_after_s, images)
    )


def best_offer(
    offers: Iterable[Offer],
    ask: GpuAsk,
    excluded: Collection[int] = (),
    memory: HostMemory | None = None,
) -> Offer | None:
    ranked = matching_offers(offers, ask, excluded, memory)
    return ranked[0] if ranked else None


def closest_offers(
    offers: Iterable[Offer], ask: GpuAsk, excluded: Collection[int] = (), limit: int = 3
) -> list[NearMiss]:
    """The non-fitting offers that come closest, then best rank. Distance is the weighted sum of
    the misses: the wrong GPU outweighs too few GPUs or too little VRAM, which outweigh any
    number of soft misses (price, currency, rented, reliability, exclusion)."""
    scored = []
    for o in offers:
        failed = _failed_checks(o, ask, excluded)
        if failed:
            distance = sum(weight for weight, _ in failed)
            scored.append(
                (distance, rank_key(o, ask.spot), NearMiss(o, tuple(r for _, r in failed)))
            )
    scored.sort(key=lambda item: (item[0], item[1]))
    return [near for _, _, near in scored[:limit]]


def describe_ask(ask: GpuAsk, currency: str) -> str:
    parts = [f"{ask.count}x {ask.type or 'any GPU'}"]
    if ask.min_vram_gb > 0:
        parts.append(f">= {ask.min_vram_gb:g} GB")
    if ask.max_usd_per_hour is not None:
        parts.append(f"<= {ask.max_usd_per_hour:.3f} $/h")
    if ask.min_reliability is not None:
        parts.append(f"reliability >= {_pct(ask.min_reliability)}")
    parts.append(f"{'spot' if ask.spot else 'on-demand'}, paid in {currency}")
    return ", ".join(parts)


def explain_no_fit(
    offers: Iterable[Offer],
    ask: GpuAsk,
    currency: str,
    excluded: Collection[int] = (),
    limit: int = 3,
) -> str:
    """A human explanation for `plan` and errors: what was asked, the closest offers, why each
    misses."""
    near = closest_offers(offers, ask, excluded, limit)
    head = f"no offer fits {describe_ask(ask, currency)}"
    if not near:
        return f"{head}: the marketplace is empty"
    lines = [f"{head}; closest:"]
    for n in near:
        price = n.offer.usd_per_hour(ask.spot)
        priced = f"{price:.3f} $/h" if price is not None else "no price"
        lines.append(f"  #{n.offer.server_id} {n.offer.gpus}, {priced}: {'; '.join(n.reasons)}")
    return "\n".join(lines)


def spot_bid_per_day(
    offer: Offer,
    max_usd_per_hour: float | None,
    rival_bids_per_day: Iterable[float] = (),
    margin: float = SPOT_MARGIN,
) -> float | None:
    """The spot bid, per day in the offer's currency, or None when the cap cannot win.

    The price to beat is the server's spot minimum or the highest rival bid, whichever is
    higher. We bid `margin` above it (above a rival bid: strictly, to win), never above the
    job's cap (which includes the renter's fee) converted to a listed per-day price in native
    units; when even the price to beat is over the cap, there is no bid.
    """
    floor = offer.spot_min_price_per_day
    if floor is None:
        return None
    rival = max(rival_bids_per_day, default=0.0)
    to_beat = max(floor, rival)
    bid = _round_up(to_beat * (1 + margin))
    if max_usd_per_hour is not None:
        if offer.usd_per_unit is None:
            return None  # a cap we cannot convert is a cap we cannot honour
        listed_cap = bill.listed_per_hour_under_cap(max_usd_per_hour, offer.spot_fee_rate)
        bid = min(bid, per_day(listed_cap) / offer.usd_per_unit)
    if bid < floor or (rival > 0 and bid <= rival):
        return None
    return bid


def _round_up(price_per_day: float) -> float:
    """Up to 8 decimals (a satoshi for bitcoin), so rounding never drops under the minimum."""
    return math.ceil(price_per_day * 1e8 - 1e-6) / 1e8


def _gb(value: float | None) -> str:
    return f"{value:g} GB" if value is not None else "unknown"


def _pct(value: float | None) -> str:
    return f"{value * 100:.1f}%" if value is not None else "unknown"
