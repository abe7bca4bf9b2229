"""Clore as a runner host (runner.backends.runner_host): the offers that fit a runner and the
budget's worst cases checked before anything is rented, the Clore backend the driver rents
with (the ledger row before every create, hedged boots, the host history), and the hand-over
and give-back of the servers the runners are put on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.factory import host_recorder, share_limits
from runner.backends.clore.market import (
    Offer,
    describe_ask,
    explain_no_fit,
    matching_offers,
    offers_from_servers,
)
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.quotes import OfferMarket
from runner.backends.clore.rental import ProvisionOptions, Rental
from runner.backends.clore.settings import CloreSettings
from runner.backends.runner_host import HandedServer, Held, RunnerHostTools, Say
from runner.core import money
from runner.core.rental_length import holds, passed_over_text, worst_hold_s
from runner.core.rentals import Quote
from runner.errors import InfrastructureError, JobCannotRun

if TYPE_CHECKING:
    from runner.backends.base import Place
    from runner.core.model import Job
    from runner.stores.pools.seat import PoolSeat


def build(tools: RunnerHostTools) -> CloreRunnerHost:
    share_limits(tools.client, tools.ledger_path)
    return CloreRunnerHost(tools)


class CloreRunnerHost:
    """One `runner start`'s renting on Clore."""

    def __init__(self, tools: RunnerHostTools) -> None:
        options: ProvisionOptions = tools.options
        self.options = options
        self.client = tools.client
        self.currency = tools.currency
        self.hosts = host_recorder(tools.ledger_path, tools.run_id, tools.clock)
        self.provisioner = Provisioner(
            client=tools.client,
            ledger=tools.ledger,
            run_id=tools.run_id,
            key=tools.key,
            host_keys=tools.host_keys,
            clock=tools.clock,
            currency=tools.currency,
            options=options,
        )
        self.clore = CloreBackend(
            client=tools.client,
            provisioner=self.provisioner,
            clock=tools.clock,
            settings=CloreSettings(currency=tools.currency),
            hosts=self.hosts,
            hedge=tools.hedge,
        )
        self._ranked: list[Offer] = []
        self._handed: dict[str, Rental] = {}  # job id -> the rental handed over

    @property
    def backend(self) -> CloreBackend:
        return self.clore

    @property
    def boot_bound_s(self) -> float:
        return self.options.online_timeout_s

    def join(self, seat: PoolSeat | None) -> None:
        self.provisioner.seat = seat

    def check_offers(self, job: Job, runners: int) -> None:
        """The offers that fit, best first; fewer than runners is refused before anything is
        registered (the core reads the market again to rent, and ranks it the same way)."""
        assert job.gpu is not None  # a runner's job always asks for a GPU
        ask, currency = job.gpu, self.currency
        rates = self.provisioner.fees().rates
        offers = offers_from_servers(self.client.marketplace().servers, currency, fees=rates)
        matching = matching_offers(offers, ask, memory=self.hosts.memory())
        ranked, short = self._holding(matching, job)
        if len(ranked) < runners:
            why = (
                explain_no_fit(offers, ask, currency)
                if not matching
                else (
                    f"{len(ranked)} servers fit {describe_ask(ask, currency)}, "
                    f"{runners} runners were asked for"
                )
            )
            if short:
                why += f"; {short}"
            raise JobCannotRun(
                why,
                "widen the ask (gpu, max-price, spot), lower --max-minutes or ask for fewer "
                "runners",
            )
        self._ranked = ranked

    def _holding(self, offers: list[Offer], job: Job) -> tuple[list[Offer], str]:
        """The offers whose host's maximum rental length (`mrl`) holds a runner's worst case
        (the boot bound, `max-minutes`, fetching its files: the hold its budget reserves), by
        the core's one rule, and why the others were passed over ("" if none was): the core
        would not rent them for a runner either."""
        assert job.gpu is not None
        hold_s = worst_hold_s(self.provisioner.image_allowance_s(job), job)
        market = OfferMarket(offers, self.currency)
        kept: list[Offer] = []
        passed: list[Quote] = []
        for offer in offers:
            quote = market.quote(offer, job.gpu)
            if quote is not None and not holds(quote, hold_s):
                passed.append(quote)
            else:
                kept.append(offer)
        return kept, passed_over_text(tuple(passed), hold_s)

    def check_budget(self, job: Job, runners: int, budget_usd: float | None) -> None:
        """Refused before anything is rented: a budget the best offers cannot fit (each
        runner's worst case: the boot bound and `max-minutes` at the price with fee, plus the
        creation fee). The core checks every rent against it again, a hedge's too."""
        if budget_usd is None:
            return
        worst = sorted(self.provisioner.worst_case_usd(job, offer) for offer in self._ranked)
        needed = sum(worst[:runners])
        if needed > budget_usd:
            raise JobCannotRun(
                f"no offer left within the budget: {runners} runner(s) may cost "
                f"{money.usd_text(needed)} at worst (renter fee and creation fee included, "
                f"over the boot bound and {job.timeout_s / 60.0:g} min), the budget is "
                f"{money.usd_text(budget_usd)}",
                "raise --budget, or lower --max-minutes or --max-price",
            )

    def stop_soon(self) -> None:
        self.clore.stop_soon()

    def held(self, place: Place) -> Held:
        rental = self._rental(place)
        assert rental.conn is not None
        return Held(rental.conn, rental.held_since)

    def _rental(self, place: Place) -> Rental:
        rental = self.clore.rental_at(place)
        if rental is None or rental.conn is None:
            raise InfrastructureError(f"{place.name}: the server is no longer held")
        return rental

    def hand_over(self, place: Place, server: int, job: Job) -> HandedServer:
        rental = self._rental(place)
        self.clore.hand_off(place, server, job)
        if rental.conn is not None:  # the runner lives on without us
            rental.conn.close()
            rental.conn = None
        self._handed[job.id] = rental
        return _handed(rental)

    def give_back_handed(self, say: Say) -> None:
        rentals = list(self._handed.values())
        if rentals:
            self.provisioner.release_all(rentals, within_s=self.options.shutdown_confirm_within_s)
            for rental in rentals:
                say(f"{rental.job_id}: order {rental.order_id} cancelled")

    def keep_seat(self) -> PoolSeat | None:
        seat, self.provisioner.seat = self.provisioner.seat, None
        return seat

    def close(self) -> None:
        self.hosts.close()  # idempotent, as close_pool: the backend's shutdown closed them
        self.provisioner.close_pool()


def _handed(rental: Rental) -> HandedServer:
    assert rental.order_id is not None
    return HandedServer(
        order_id=rental.order_id,
        server_id=rental.offer.server_id,
        held_since=rental.held_since,
        currency=rental.currency,
        spot=rental.spot,
        usd_per_unit=rental.usd_per_unit,
        fee_rate=rental.fee_rate,
        creation_fee_native=rental.creation_fee_native,
        usd_per_hour=rental.usd_per_hour,
        gpus=rental.offer.gpus,
        reservation_id=rental.reservation.id if rental.reservation is not None else None,
    )
