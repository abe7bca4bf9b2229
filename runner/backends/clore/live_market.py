"""The Clore marketplace as the core sees it: a snapshot at most a minute old, priced as the
provisioner will rent, and what the backend offers the core's book from it (book_offer): the
market, the boot times the host history expects, each image's pulls, the hedging policy.

Read only off the driver's loop (on a rent's thread, or before the run): deciding never waits
for the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import replace

from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.host_memory import HostRecorder
from runner.backends.clore.market import Offer, offers_from_servers
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.quotes import OfferMarket
from runner.backends.clore.settings import DEFAULT_IMAGE
from runner.clock import Clock
from runner.core.book_offer import BookOffer
from runner.core.hedge import HedgePolicy
from runner.core.model import GpuAsk, Job
from runner.core.rentals import BootTimes, Quote

MARKET_TTL_S = 60.0  # the marketplace is ~2,100 servers: fetch it at most once a minute
# What the core plans rent-ahead with until the run has measured its own create -> SSH-ready
# times: a Clore server takes minutes (image pull, boot, sshd).
DEFAULT_BOOT_S = 180.0
# A job that names no image (it runs the default one): the boot bound of a run with no jobs
# yet (a queue server's), whose jobs come later.
_NO_IMAGE_JOB = Job("", "", "true", 0)


class LiveMarket(OfferMarket):
    """The marketplace as the core sees it: the last snapshot fetched, priced as the
    provisioner will rent (a spot order bids over the rivals in its server's book), and every
    offer seen this run kept for fitting (a server we hold is listed as rented)."""

    def __init__(
        self, provisioner: Provisioner, offers: list[Offer], currency: str, unread: str = ""
    ) -> None:
        super().__init__(offers, currency)
        self._provisioner = provisioner
        self._unread = unread  # why there is no snapshot, if there is none

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        return self._unread or super().why_none(ask, excluded)

    def update(self, offers: Iterable[Offer]) -> None:
        self._unread = ""
        super().update(offers)

    def quote(self, offer: Offer, ask: GpuAsk) -> Quote | None:
        quote = super().quote(offer, ask)
        if quote is None:
            return None
        fee = self._provisioner.creation_fee_usd(offer, ask.spot)
        return replace(quote, creation_fee_usd=fee, fee_rate=offer.fee_rate(ask.spot))

    def rival_bids(self, offer: Offer) -> Iterable[float]:
        # The last book read, however old: the core's loop never waits for the API. A rent
        # reads it afresh (off the loop) and asks for a new price if the bid moved up.
        return self._provisioner.known_rival_bids(offer.server_id)


class MarketFeed:
    """The marketplace snapshots of one run, read through `client` in `currency`."""

    def __init__(
        self, client: CloreClient, provisioner: Provisioner, clock: Clock, currency: str
    ) -> None:
        self.client = client
        self.provisioner = provisioner
        self.clock = clock
        self.currency = currency
        self._snapshot: tuple[float, list[Offer]] | None = None  # (read at, offers)
        self.live: LiveMarket | None = None  # the core's, once a book was offered

    def offers(self) -> list[Offer]:
        """Today's offers, read again once the last snapshot is a minute old."""
        now = self.clock.now()
        if self._snapshot is None or now - self._snapshot[0] > MARKET_TTL_S:
            rates = self.provisioner.fees().rates  # read first: the offers' $/h include them
            servers = self.client.marketplace().servers
            self._snapshot = (now, offers_from_servers(servers, self.currency, fees=rates))
        return self._snapshot[1]

    def hourly(self, job: Job, offer: Offer) -> float:
        """What renting `offer` for `job` costs per hour: a spot bid, not the spot minimum."""
        spot = job.gpu is not None and job.gpu.spot
        price_per_day = self.provisioner.price_per_day(job, offer)
        if price_per_day is None:
            return offer.usd_per_hour(spot) or 0.0  # no bid fits: renting will skip the offer
        return self.provisioner.usd_per_hour(offer, price_per_day, spot)

    def refresh(self) -> None:
        """A new snapshot for the core, read off its loop, once the one it has is a minute
        old (a queue server runs for days; a host that failed may have been rented away)."""
        if self.live is None:
            return
        before = self._snapshot
        try:
            offers = self.offers()
        except api_errors.CloreApiError:
            return  # the snapshot it has stays: the next rent tries again
        if self._snapshot is not before:
            self.live.update(offers)

    def book_offer(self, jobs: Sequence[Job], hosts: HostRecorder, hedge: HedgePolicy) -> BookOffer:
        """What the core builds its book of servers from: today's offers, and boot times
        allowed as long as the provisioner waits for one."""
        try:
            market = LiveMarket(self.provisioner, self.offers(), self.currency)
        except api_errors.CloreApiError as exc:
            # Nothing can be rented: each job ends saying why, and the reports are written.
            # Its own words (the hint, what to do, is the command's to give): the API names
            # the read that failed, a refused key is the same refusal whichever read met it.
            market = LiveMarket(self.provisioner, [], self.currency, unread=exc.message)
        self.live = market
        bound_s = self.provisioner.options.online_timeout_s  # a dead host is given up then
        memory = hosts.memory()
        images = sorted({j.image or DEFAULT_IMAGE for j in jobs})
        market.remember(memory, bound_s, images)  # a host whose cache holds them ranks first
        pulls = replace(memory.pulls, default_image=DEFAULT_IMAGE)
        self.provisioner.pulls = pulls
        # The longest a boot of each image may take, its own pull included: what the budget
        # reserves for a rent for a job of it (a job's own bound where longer: the core's
        # `boot_allowance_s`), as `plan` prices it. The slowest is the bound of an image the
        # core is not told of.
        allowance = self.provisioner.image_allowance_s
        by_image_s = {j.image or "": allowance(j) for j in (*jobs, _NO_IMAGE_JOB)}
        expected_s = memory.expected_boot_s() if memory.hosts else DEFAULT_BOOT_S
        boot = BootTimes(expected_s, max(by_image_s.values()), by_image_s=by_image_s)
        return BookOffer(market=market, boot=boot, pulls=pulls, hedge=hedge)
