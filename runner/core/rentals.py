"""What the core says and hears about servers, and what a rental costs.

The core decides which servers to hold; an adapter (the Clore client, or the fixed hosts of the
SSH and local backends) carries the decisions out and reports back. Everything here is plain
data and pure arithmetic: prices are USD per hour with the renter's fee already on them, times
are seconds passed in by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace
from typing import Protocol

from runner.core import money
from runner.core.events import Command
from runner.core.model import GpuAsk, Job, Provisioning

__all__ = ["Provisioning"]  # where the core's server decisions find it, beside the rest


@dataclass(frozen=True)
class Quote:
    """A server the core may rent (an offer on the market) or already has (a fixed host)."""

    host: str  # the market's name for the machine; a host that failed is excluded by it
    gpu_model: str = ""
    gpu_count: int = 0
    usd_per_hour: float = 0.0  # listed price plus the renter's fee
    creation_fee_usd: float = 0.0  # charged once the order has lived `creation_fee_after_s`
    spot: bool = False
    fee_rate: float = 0.0  # the renter's fee already in `usd_per_hour` (for messages)
    # The marketplace's grace before the creation fee is charged (Clore: 10 minutes; 0: from
    # the start): the budget's worst case counts the fee only for a hold this long.
    creation_fee_after_s: float = 0.0
    # What the host history expects of this host (None: nothing known; the run's own figures
    # stand in): a healthy boot, create -> SSH, and the chance a boot of it fails.
    boot_s: float | None = None
    fail_chance: float | None = None
    # The longest the market lets one order live, from its create (Clore's `mrl`; None: no
    # maximum known). The core rents a quote only for a job whose worst case it holds.
    max_rental_s: float | None = None
    # What a server rented as this quote became once ours (None on an offer: any job fits):
    # the image it was started with ("" the default one), which no other image's job can use,
    # and the trust domain of the jobs that ran on it, which no other domain's job may use.
    image: str | None = None
    trust: str | None = None

    def cost_usd(self, held_s: float) -> float:
        """What holding a rental of this quote for `held_s` costs (rental_cost_usd)."""
        return rental_cost_usd(
            self.usd_per_hour, held_s, self.creation_fee_usd, self.creation_fee_after_s
        )


def rental_cost_usd(
    usd_per_hour: float, held_s: float, creation_fee_usd: float, fee_after_s: float = 0.0
) -> float:
    """What holding a rental for `held_s` costs: the hours at the price with fee, plus the
    creation fee once the order has lived `fee_after_s` (its quote's `creation_fee_after_s`).
    With the longest possible hold this is the worst case a budget must fit before the rent."""
    return money.worst_case_usd(usd_per_hour, held_s, creation_fee_usd, fee_after_s)


class Market(Protocol):
    """The offers the core may rent from. Pure: answers from data the adapter refreshed."""

    def best(self, ask: GpuAsk | None, excluded: Set[str]) -> Quote | None:
        """The offer a job asking `ask` should rent, leaving out `excluded` hosts."""
        ...

    def fits(self, quote: Quote, ask: GpuAsk | None) -> bool:
        """Could a job asking `ask` run on a server rented as `quote`?"""
        ...

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        """Why `best` found nothing, for the job's error."""
        ...


class NoMarket:
    """Fixed hosts only (SSH, local): nothing to rent, and every host fits every job."""

    def best(self, ask: GpuAsk | None, excluded: Set[str]) -> Quote | None:
        return None

    def fits(self, quote: Quote, ask: GpuAsk | None) -> bool:
        return True

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        return "no host of this backend is left to run it"


@dataclass(frozen=True)
class BootTimes:
    """How long a rented server takes from the create to answering SSH.

    `expected_s` is what rent-ahead plans with: the default until the run has measured its own
    boots, then their mean. `allowance_s` is the longest a boot may take before the rental is
    given up: the budget reserves it for every rent. `by_image_s` is that longest boot for
    each image (its pull is its own: a job's worst case counts its own image's, never the
    slowest image of the run); an image it does not name takes `allowance_s`.
    """

    default_s: float = 180.0
    allowance_s: float = 1200.0
    measured_s: tuple[float, ...] = ()
    # image ("" the default one, as a server's `Quote.image`) -> its longest boot
    by_image_s: Mapping[str, float] = field(default_factory=dict, hash=False)

    def allowance_for(self, image: str | None) -> float:
        """The longest a boot of a server started with `image` may take (None, "": the
        default image)."""
        return self.by_image_s.get(image or "", self.allowance_s)

    @property
    def expected_s(self) -> float:
        if not self.measured_s:
            return self.default_s
        return sum(self.measured_s) / len(self.measured_s)

    def with_sample(self, seconds: float) -> BootTimes:
        return replace(self, measured_s=(*self.measured_s, max(0.0, seconds)))


# -- commands: the core asks the adapter to ... -------------------------------------------------


@dataclass(frozen=True)
class RentServer:
    """Rent `quote` as server `server` for `for_job`. `worst_case_usd` is what the budget
    reserved for it; `ahead` says it is rented before the job is ready."""

    server: int
    quote: Quote
    for_job: str
    worst_case_usd: float
    ahead: bool = False
    # A hedge: a second host for the same job, rented because server `hedge_of` boots late.
    # The first of the two to answer SSH runs the job; the other is given back at once.
    hedge_of: int | None = None
    # Rented for warmth (serve's --warm): meant for no job yet; this stands in for the job it
    # boots for (`for_job` is its id), and the next job that fits the server takes it.
    warm: Job | None = None


@dataclass(frozen=True)
class StartOn:
    """Run attempt `attempt` of `job_id` on server `server` (ready, and this job's now)."""

    job_id: str
    attempt: int
    server: int
    timeout_s: float
    # For a person, not a decision (left out of equality): the server was up, idle, before
    # the job asked for one (a warm server: no boot waited for), and how long the job waited
    # for a server, from asking to now.
    warm: bool = field(default=False, compare=False)
    waited_s: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class ReleaseServer:
    """Give server `server` back (cancel its order; a fixed host is just let go)."""

    server: int
    reason: str
    rented: bool = True


@dataclass(frozen=True)
class JobNote:
    """Something about a job's servers a person should be told (a slow boot that got no
    hedge, and why); it changes nothing."""

    job_id: str
    text: str


ServerCommand = RentServer | StartOn | ReleaseServer | JobNote
CoreCommand = Command | ServerCommand  # what the core with servers answers

# -- events: the adapter tells the core that ... ------------------------------------------------


@dataclass(frozen=True)
class ServerReady:
    """Server `server` answers SSH: jobs can start on it."""

    server: int


@dataclass(frozen=True)
class ServerLost:
    """Server `server` is gone (outbid, dropped): its host is not used again this run."""

    server: int
    reason: str


@dataclass(frozen=True)
class RentFailed:
    """Renting server `server` failed; nothing is held. `cost_usd` is what the failed order
    cost all the same. `fatal` (no balance, a refused key) stops the run: every rent would fail."""

    server: int
    reason: str
    cost_usd: float = 0.0
    fatal: bool = False
    # The job it was for cannot run on any offer (a budget pool's limit): it fails as
    # unavailable with `reason`, and the host is not blamed.
    job_cannot_run: bool = False
    # The price moved since the quote (a spot book read afresh): the market has the new one,
    # the host is not blamed, and the job rents again at the new price if the budget allows.
    requote: bool = False


@dataclass(frozen=True)
class ServerReleased:
    """The order of server `server` is confirmed gone; `cost_usd` is the provider's own figure
    when it gave one (it replaces the core's estimate)."""

    server: int
    cost_usd: float | None = None


@dataclass(frozen=True)
class ServerDeploying:
    """Server `server` is online, its container deploying (its image pulls): the host is
    alive, and what is left of its boot is the image's pull, which every host lacking the
    image shares. Told at most once per rent, before its ServerReady or RentFailed."""

    server: int


ServerEvent = ServerReady | ServerLost | RentFailed | ServerReleased | ServerDeploying
