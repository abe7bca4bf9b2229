"""A thin client for the Clore.ai REST API as it really behaves, not as it is documented.

- Every reply is judged by its JSON `code` first; the HTTP status only fills in when there is none.
- Every call goes through one serial `RateLimiter` (the process-wide one by default).
- Reads are retried on rate limits and transient failures, with backoff and jitter, bounded in
  attempts and in total time (transport). `create_order` is never retried: it returns no id and
  is not idempotent, so the client finds the new order in `my_orders` instead, and after an
  ambiguous failure (code 1, a non-JSON reply, a timeout, a dropped connection) it looks there
  first (order_create).
- The API key lives in one private object; it is sent per request and redacted from any text that
  ends up in an exception or a log line.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import requests
from pydantic import ValidationError

from runner.backends.clore import errors as e
from runner.backends.clore.models import (
    Marketplace,
    MarketServer,
    Order,
    RenterFees,
    SpotMarket,
    Wallet,
)
from runner.backends.clore.order_create import CreatePacing, OrderCreation
from runner.backends.clore.order_request import OrderRequest
from runner.backends.clore.ownership import CreateJournal, OffsetMeter
from runner.backends.clore.ratelimit import DEFAULT_LIMITER, RateLimiter
from runner.backends.clore.transport import Json, ReadHooks, RetryPolicy, Transport

log = logging.getLogger(__name__)

# The names callers build a client and its requests with.
__all__ = ["CloreClient", "OrderRequest", "RetryPolicy"]

DEFAULT_URL = "https://api.clore.ai/v1"
DEFAULT_TIMEOUT_S = (10.0, 60.0)  # (connect, read): the marketplace reply is ~2,100 servers
RECOVER_DELAYS_S = (2.0, 3.5, 5.0, 8.0, 12.0, 20.0)  # G-gv's schedule: my_orders lags create
# After a create answered as a success whose order is not proven ours within RECOVER_DELAYS_S:
# an order exists and is ours, so it is never given up after 50 s. Looked for this much longer,
# backing off (about 6 minutes in all: inside the creation fee's 10-minute grace), then named.
FOLLOW_UP_DELAYS_S = (15.0, 25.0, 40.0, 60.0, 90.0, 120.0)
CREATE_RATE_LIMIT_RETRIES = 3  # creates refused with code 5 retried on the same server
CREATE_RATE_LIMIT_WAIT_S = 6.0  # beyond the limiter's own 5.5 s create gap
KEY_HINT = (
    "create an API key in your clore.ai profile (API section), then `export CLORE_API_KEY=...`; "
    "in GitHub Actions pass it from a secret"
)


class CloreClient:
    """The Clore API. Thread-safe as far as the limiter goes: it serialises all calls."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_URL,
        limiter: RateLimiter | None = None,
        timeout_s: float | tuple[float, float] = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        recover_delays_s: Sequence[float] = RECOVER_DELAYS_S,
        session: requests.Session | None = None,
        follow_up_delays_s: Sequence[float] = FOLLOW_UP_DELAYS_S,
        rng: random.Random | None = None,
    ) -> None:
        self.transport = Transport(
            api_key,
            base_url,
            limiter or DEFAULT_LIMITER,
            timeout_s,
            retry or RetryPolicy(),
            session or requests.Session(),
            rng or random.Random(),
        )
        # The module's pacing is read now, not at import, so a test harness may shorten it.
        pacing = CreatePacing(
            tuple(recover_delays_s),
            tuple(follow_up_delays_s),
            CREATE_RATE_LIMIT_RETRIES,
            CREATE_RATE_LIMIT_WAIT_S,
        )
        # Looked up at each call, so a replaced `my_orders` (a test's fault) is the one used.
        self._creation = OrderCreation(self.transport, lambda: self.my_orders(), pacing)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> CloreClient:
        """A client from CLORE_API_KEY and CLORE_API_URL. Raises MissingApiKeyError."""
        env = os.environ if environ is None else environ
        key = env.get("CLORE_API_KEY", "").strip()
        if not key:
            raise e.MissingApiKeyError("CLORE_API_KEY is not set", hint=KEY_HINT)
        return cls(key, base_url=env.get("CLORE_API_URL", "").strip() or DEFAULT_URL, **kwargs)

    def __repr__(self) -> str:
        return f"CloreClient(base_url={self.base_url!r}, api_key='***')"

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    @base_url.setter
    def base_url(self, url: str) -> None:  # a test points a client at another fake
        self.transport.base_url = url.rstrip("/")

    @property
    def limiter(self) -> RateLimiter:
        return self.transport.limiter

    @property
    def retry(self) -> RetryPolicy:
        return self.transport.retry

    @property
    def clock_offset(self) -> OffsetMeter:
        """The API's clock against ours, from its replies."""
        return self.transport.clock_offset

    @property
    def hooks(self) -> ReadHooks:
        """Who hears about retried, given-up and answered reads."""
        return self.transport.hooks

    @property
    def recover_delays_s(self) -> tuple[float, ...]:
        return self._creation.pacing.recover_delays_s

    # --- endpoints -------------------------------------------------------------------------

    def marketplace(self) -> Marketplace:
        """Every server on the market. Entries that do not parse are skipped and counted."""
        reply = self.transport.read("GET", "marketplace")
        servers: list[MarketServer] = []
        for raw in _list(reply.get("servers")):
            try:
                servers.append(MarketServer.model_validate(raw))
            except ValidationError:
                log.debug("skipping a marketplace entry that does not parse")
        skipped = len(_list(reply.get("servers"))) - len(servers)
        mine = [i for i in _list(reply.get("my_servers")) if isinstance(i, int)]
        return Marketplace(servers=servers, my_servers=mine, skipped=skipped)

    def my_orders(self, return_completed: bool = False) -> list[Order]:
        """Our orders; with `return_completed`, ended ones too (they carry `expired`)."""
        params = {"return_completed": "true"} if return_completed else None
        reply = self.transport.read("GET", "my_orders", params=params)
        orders = []
        for raw in _list(reply.get("orders")):
            try:
                orders.append(Order.model_validate(raw))
            except ValidationError:
                # Only an order without an int id lands here: nothing could cancel it anyway.
                log.warning("skipping a my_orders entry without a usable id")
        return orders

    def wallets(self) -> list[Wallet]:
        reply = self.transport.read("GET", "wallets")
        return [Wallet.model_validate(w) for w in _list(reply.get("wallets"))]

    def renter_fees(self) -> RenterFees:
        """This account's renter fee rates and creation fees."""
        return RenterFees.model_validate(self.transport.read("GET", "renter_fees"))

    def spot_marketplace(self, server_id: int) -> SpotMarket:
        """The spot book of one server (bids and minimum prices are per day)."""
        reply = self.transport.read("GET", "spot_marketplace", params={"market": str(server_id)})
        market = reply.get("market")
        fields = market if isinstance(market, dict) else {}
        return SpotMarket.model_validate({**fields, "exists": reply.get("exists", True)})

    def set_spot_price(self, order_id: int, price_per_day: float) -> None:
        """Change a spot bid (per day, order currency). Retried only on rate limits: a lost
        reply to a successful lowering would turn a retry into `can_lower_every_600_seconds`."""
        body = {"order_id": order_id, "desired_price": price_per_day}
        self.transport.read(
            "POST",
            "set_spot_price",
            body=body,
            retry_if=lambda x: isinstance(x, e.RateLimitedError),
        )

    def cancel_order(
        self, order_id: int, issue: str | None = None, abort: threading.Event | None = None
    ) -> None:
        """Cancel an order. The order may stay listed briefly: confirm with `my_orders`.
        `abort` set gives up the retries' waits (RequestAborted): a run stopped by a signal
        does not spend CI's grace retrying an API that refuses."""
        body: Json = {"id": order_id}
        if issue:
            body["issue"] = issue
        self.transport.read("POST", "cancel_order", body=body, abort=abort)

    def create_order(
        self,
        request: OrderRequest,
        abort: threading.Event | None = None,
        journal: CreateJournal | None = None,
        taken: Collection[int] = (),
    ) -> Order:
        """Rent a server and return its order, found in `my_orders` (the reply has no id).

        Never retried. Definite refusals (codes 2-6) raise at once. Ambiguous failures look in
        `my_orders` first and return the order if one is provably this create's (see
        ownership; `taken` are orders other rentals hold); otherwise re-raise, noting none
        appeared. A success whose order never appears raises OrderOutcomeUnknownError.
        `journal` hears when the request is about to go out (after the rate-limit wait) and
        when it was answered: the ledger's ownership marks. `abort` set while the create waits
        for its rate-limit slot raises RequestAborted, and nothing is sent.
        """
        return self._creation.create(request, abort, journal, taken)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
