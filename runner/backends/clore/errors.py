"""Typed Clore API errors. All are InfrastructureError (exit 3) because a user can see them.

The mapping reads the reply's JSON `code` before its HTTP status (the status lies: code 6 came with
HTTP 200 and with HTTP 500, code 5 with 429). `retryable` says whether repeating the *same* read
may succeed; it never licenses repeating a `create_order` (see `api.CloreClient.create_order`).
Messages never contain the API key: the client redacts every text it puts in an error.
"""

from __future__ import annotations

from typing import Any

from runner.errors import InfrastructureError


class CloreApiError(InfrastructureError):
    """A call to the Clore API failed. `code`/`error` are the API's, `http_status` is HTTP's."""

    retryable: bool = False  # a class default; an instance may say otherwise

    def __init__(
        self,
        message: str,
        *,
        endpoint: str = "",
        code: int | None = None,
        error: str | None = None,
        http_status: int | None = None,
        hint: str = "",
        reply: dict[str, Any] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, hint)
        if retryable is not None:
            self.retryable = retryable
        self.endpoint = endpoint
        self.code = code
        self.error = error
        self.http_status = http_status
        self.reply: dict[str, Any] = reply or {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, endpoint={self.endpoint!r}, "
            f"code={self.code!r}, error={self.error!r}, http_status={self.http_status!r})"
        )


class MissingApiKeyError(CloreApiError):
    """CLORE_API_KEY is not set."""


class DatabaseError(CloreApiError):
    """Code 1. The docs say retry later; a create answered this way may still have happened."""

    retryable = True


class InvalidInputError(CloreApiError):
    """Code 2: the request was malformed."""


class InvalidTokenError(CloreApiError):
    """Code 3: the API refused the key (also what a wrong header name gets)."""


class InvalidEndpointError(CloreApiError):
    """Code 4."""


class RateLimitedError(CloreApiError):
    """Code 5 / HTTP 429: slow down. `retry_after_s` is the server's hint when it sent one."""

    retryable = True

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class ApplicationError(CloreApiError):
    """Code 6 with an `error` string this client has no class for; the string is kept verbatim."""


class NotEnoughBalanceError(ApplicationError):
    """`not_enough_balance`."""


class ServerAlreadyRentedError(ApplicationError):
    """`server-already-rented`: someone (maybe we) holds it; pick another server."""


class TooLowPriceError(ApplicationError):
    """`too_low_price`: the spot bid is under the server's minimum."""


class ServerOfflineError(ApplicationError):
    """`server-offline`."""


class CurrencyNotAllowedError(ApplicationError):
    """`currency-not-allowed`: seen even for hosts listing the currency; treat as per-host."""


class ExceededMaxStepError(ApplicationError):
    """`exceeded_max_step` from set_spot_price; `max_step` is the largest allowed change."""

    @property
    def max_step(self) -> float | None:
        return _number(self.reply.get("max_step"))


class CannotLowerYetError(ApplicationError):
    """`can_lower_every_600_seconds`; `time_to_lowering` is how long to wait (s)."""

    @property
    def time_to_lowering_s(self) -> float | None:
        return _number(self.reply.get("time_to_lowering"))


class UnknownCodeError(CloreApiError):
    """A `code` outside the documented 0-6, or a reply with no `code` at all."""


class NonJsonReplyError(CloreApiError):
    """The body was not JSON (a proxy's HTML 502, say). The API itself always answers JSON."""

    retryable = True


class TransportError(CloreApiError):
    """Timeout or dropped connection: the request may or may not have reached the API.
    `cause` is the reason in a few words ('connection refused')."""

    retryable = True

    def __init__(self, message: str, *, cause: str = "the connection failed", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.cause = cause


class OrderOutcomeUnknownError(CloreApiError):
    """A create reported success, or failed in a way that may have rented the server anyway, and
    the order could not be found in my_orders. A billed server may exist: `server_id` is what
    `clore-run cleanup` reconciles on.
    """

    def __init__(
        self,
        message: str,
        *,
        server_id: int,
        accepted: bool = False,
        maybe_ours: tuple[int, ...] = (),
        why: str = "",
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.server_id = server_id
        # The API answered the create as a success: an order was made, and it is ours.
        self.accepted = accepted
        self.maybe_ours = maybe_ours  # orders on the server that may be ours, none proven
        self.why = why  # why none was proven ours, in words


ERROR_STRINGS: dict[str, type[ApplicationError]] = {
    # Exact strings from the reference: the mixed separators are the API's, do not normalise.
    "not_enough_balance": NotEnoughBalanceError,
    "server-already-rented": ServerAlreadyRentedError,
    "too_low_price": TooLowPriceError,
    "server-offline": ServerOfflineError,
    "currency-not-allowed": CurrencyNotAllowedError,
    "exceeded_max_step": ExceededMaxStepError,
    "can_lower_every_600_seconds": CannotLowerYetError,
}

CODES: dict[int, tuple[type[CloreApiError], str]] = {
    1: (DatabaseError, "database error"),
    2: (InvalidInputError, "invalid input data"),
    3: (InvalidTokenError, "invalid API token"),
    4: (InvalidEndpointError, "invalid endpoint"),
    5: (RateLimitedError, "rate limit exceeded"),
}

# What each call was doing, as a person would say it: an endpoint's name is the API's, not
# the reader's (`renter_fees` meant nothing to someone whose key was refused).
DOING = {
    "marketplace": "listing the market",
    "spot_marketplace": "reading a spot market",
    "my_orders": "listing your orders",
    "wallets": "reading your wallets",
    "renter_fees": "reading your fees",
    "create_order": "renting a server",
    "cancel_order": "cancelling an order",
    "set_spot_price": "changing a spot bid",
}
REFUSED_KEY = "the Clore API refused the key in CLORE_API_KEY"


def about(endpoint: str) -> str:
    """The start of every message about one call: `Clore API (listing the market)`."""
    return f"Clore API ({DOING.get(endpoint, 'a request')})"


HINTS: dict[type[CloreApiError], str] = {
    InvalidTokenError: "check CLORE_API_KEY: copy the key again from your clore.ai profile "
    "(API section), or create a new one there",
    NotEnoughBalanceError: "top up the wallet of the order currency on clore.ai",
    RateLimitedError: "the API allows about one request per second per key",
    CurrencyNotAllowedError: "this host refuses the currency; try another host or currency",
    ServerAlreadyRentedError: "someone rented this server first; pick another offer",
    TooLowPriceError: "raise the spot bid to at least the server's minimum",
}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
