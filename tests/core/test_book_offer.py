"""The core builds its server book from what a backend offers (`ServerBook.from_offer`)."""

from __future__ import annotations

from runner.core.book_offer import BookOffer
from runner.core.hedge import HedgePolicy
from runner.core.model import GpuAsk, Job
from runner.core.pulls import Pulls
from runner.core.rentals import BootTimes, Provisioning, Quote, RentServer
from runner.core.servers import ServerBook
from runner.core.simulate_market import ModelMarket

JOB = Job(id="a", name="a", run="true", gpu=GpuAsk(type="3090"), timeout_s=600.0)
OFFERS = (Quote("a1", "RTX 3090", 1, 0.30), Quote("a2", "RTX 3090", 1, 0.40))


def test_a_market_offered_is_rented_from_with_the_boot_times_and_budget_given() -> None:
    boot = BootTimes(default_s=50.0, allowance_s=200.0)
    pulls = Pulls({"img": {"a1": (30.0,)}})
    hedge = HedgePolicy(enabled=True)
    offer = BookOffer(market=ModelMarket(OFFERS), boot=boot, pulls=pulls, hedge=hedge)
    book = ServerBook.from_offer(
        [JOB], 2, offer, budget_usd=5.0, provisioning=Provisioning.ON_DEMAND, now=10.0
    )
    assert book.renting and book.budget_usd == 5.0 and book.boot == boot
    assert book.pulls is pulls and book.hedge is hedge
    book.want("a", 1, 600.0, 10.0)
    (rent,) = [c for c in book.decide(10.0) if isinstance(c, RentServer)]
    assert rent.quote.host == "a1" and rent.for_job == "a"


def test_fixed_hosts_offered_are_held_from_the_start_and_nothing_is_rented() -> None:
    offer = BookOffer(fixed_hosts=[Quote("h1"), Quote("h2")])
    book = ServerBook.from_offer([JOB], 2, offer)
    assert not book.renting
    assert [view.quote.host for view in book.servers()] == ["h1", "h2"]
