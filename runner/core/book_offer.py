"""What a backend offers the core's server book, pure: the book is the core's to build.

A backend that rents hands over its market (today's offers), what its host history says of
boots and image pulls, and how it hedges a late boot; one that rents nothing hands over the
hosts that already exist. The core builds its `ServerBook` from that (`ServerBook.from_offer`)
with the run's own figures: the jobs, the cap, the budget, how far ahead it rents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.pulls import Pulls
from runner.core.rentals import BootTimes, Market, Quote


@dataclass(frozen=True)
class BookOffer:
    """A backend's offer: a market to rent from (None: nothing to rent), or fixed hosts."""

    market: Market | None = None
    fixed_hosts: Sequence[Quote] = ()  # servers that already exist (SSH hosts, local slots)
    boot: BootTimes | None = None  # None: the defaults, until boots are seen
    pulls: Pulls = field(default_factory=Pulls)  # each image's pulls, from the host history
    hedge: HedgePolicy = NO_HEDGE
