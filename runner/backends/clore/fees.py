"""The fees of one run: the account's renter fee rates and creation fees, read once.

`renter_fees` says what this key's account pays (Proof-of-Holding can lower the base fee); when
it cannot be read, the documented rates stand in and the reports say so. The arithmetic itself
is in `runner.core.money`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from runner.backends.clore import bill
from runner.backends.clore import errors as e
from runner.backends.clore.api import CloreClient
from runner.backends.clore.models import RenterFees

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeeSchedule:
    """What renting costs on top of the listed price, for orders paid in `currency`."""

    currency: str
    rates: bill.RenterFeeRates = bill.DOCUMENTED_RATES
    on_demand_creation_fee_native: float | None = None
    spot_creation_fee_native: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def source(self) -> str:
        return self.rates.source

    def fee_rate(self, spot: bool) -> float:
        return self.rates.fee_rate(spot)

    def creation_fee_native(self, spot: bool) -> float | None:
        return self.spot_creation_fee_native if spot else self.on_demand_creation_fee_native

    def creation_fee_usd(self, spot: bool, usd_per_unit: float | None) -> float:
        native = self.creation_fee_native(spot)
        if native is None or usd_per_unit is None:
            return bill.FALLBACK_CREATION_FEE_USD
        return native * usd_per_unit

    def describe(self) -> str:
        return (
            f"renter fee {self.rates.on_demand_fee_rate * 100:g} % on-demand, "
            f"{self.rates.spot_fee_rate * 100:g} % spot ({self.source} rates)"
        )


def fee_schedule_from(reply: RenterFees, currency: str) -> FeeSchedule:
    rates = bill.renter_fee_rates(reply.fee_rate(False, currency), reply.fee_rate(True, currency))
    return FeeSchedule(
        currency,
        rates,
        reply.creation_fee_native(False, currency),
        reply.creation_fee_native(True, currency),
        (rates.note,) if rates.note else (),
    )


def read_fee_schedule(client: CloreClient, currency: str) -> FeeSchedule:
    """The account's fees, or the documented ones when `renter_fees` fails. A refused key and
    an API that cannot be reached are not such failures: nothing else would work either, and
    the caller's next read would wait as long again before saying so."""
    try:
        return fee_schedule_from(client.renter_fees(), currency)
    except (e.InvalidTokenError, e.TransportError):
        raise
    except e.CloreApiError as exc:
        log.warning("renter_fees: %s; using the documented fee rates", exc.message)
        # in words, not the endpoint's name; exc.message already says which read failed
        note = f"your fee rates could not be read: {exc.message}"
        return FeeSchedule(currency, bill.RenterFeeRates(note=note), notes=(note,))
