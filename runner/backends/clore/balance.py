"""The wallet check before a run's first rental: the run's currency must pay for that rental's
worst case, or nothing is rented at all."""

from __future__ import annotations

import threading

from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.market import Offer
from runner.errors import RunMustStop


class BalanceCheck:
    """Checked once per run; every later rental stops the same way when it failed."""

    def __init__(self, client: CloreClient, currency: str) -> None:
        self.client = client
        self.currency = currency
        self._lock = threading.Lock()
        self._checked = False
        self._short: RunMustStop | None = None

    def check(self, offer: Offer, worst_case_usd: float) -> None:
        """Raises RunMustStop when the wallet cannot pay for `offer`'s worst case."""
        with self._lock:  # the other workers wait for the verdict, then share it
            if not self._checked:
                self._checked = True
                try:
                    self._read(offer, worst_case_usd)
                except RunMustStop as exc:
                    self._short = exc
            if self._short is not None:
                raise RunMustStop(self._short.message, self._short.hint)

    def _read(self, offer: Offer, worst_case_usd: float) -> None:
        try:
            wallets = {w.name: w for w in self.client.wallets()}
        except api_errors.InvalidTokenError as exc:
            raise RunMustStop(str(exc)) from None
        except api_errors.CloreApiError:
            return  # not knowing is no reason to stop: the create says not_enough_balance
        currency = self.currency
        wallet = wallets.get(currency)
        balance = wallet.balance if wallet is not None else 0.0
        if balance is None or offer.usd_per_unit is None or offer.usd_per_unit <= 0:
            return
        needed = worst_case_usd / offer.usd_per_unit
        if balance < needed:
            raise RunMustStop(
                f"the {currency} wallet holds {balance:g}, and the first rental may cost "
                f"up to {needed:g} {currency} (${worst_case_usd:.2f}, fees included): "
                "nothing was rented",
                f"top up the {currency} wallet on clore.ai, or pay in another currency "
                "(`currency:` in the pipeline)",
            )
