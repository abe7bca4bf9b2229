"""A thin client for the Clore.ai REST API as it really behaves, not as it is documented.

- Every reply is judged by its JSON `code` first; the HTTP status only fills in when there is none.
- Every call goes through one serial `RateLimiter` (the process-wide one by default).
- Reads are retried on rate limits and transient failures, with backoff and jitter, bounded in
  attempts and in total time. `create_order` is never retried: it returns no id and is not
  idempotent, so the client finds the new order in `my_orders` instead, and after an ambiguous
  failure (code 1, a non-JSON reply, a timeout, a dropped connection) it looks there first.
- The API key lives in one private object; it is sent per request and redacted from any text that
  ends up in an exception or a log line.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
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
from runner.backends.clore.ownership import (
    Claim,
    CreateJournal,
    OffsetMeter,
    Verdict,
    after_success,
    find_ours,
    new_tag,
    tagged_late,
)
from runner.backends.clore.ratelimit import DEFAULT_LIMITER, RateLimiter
from runner.transport_words import cause_in_words
from runner.untrusted import console_line

log = logging.getLogger(__name__)

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

Json = dict[str, Any]


class _Secret:
    """Holds the key; its repr and str never show it."""

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        return text.replace(self._value, "***") if self._value else text

    def __repr__(self) -> str:
        return "_Secret('***')"

    __str__ = __repr__


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of reads: exponential backoff with jitter, bounded in attempts and total seconds."""

    max_attempts: int = 5
    max_total_s: float = 90.0
    base_s: float = 2.0
    cap_s: float = 30.0
    jitter: float = 0.25  # up to +25 %, so clients that failed together do not retry together

    def delay_s(self, attempt: int, exc: e.CloreApiError, rng: random.Random) -> float:
        backoff = min(self.cap_s, self.base_s * 2**attempt) * (1 + rng.uniform(0, self.jitter))
        hinted = exc.retry_after_s if isinstance(exc, e.RateLimitedError) else None
        return float(max(backoff, hinted or 0.0))


@dataclass(frozen=True)
class OrderRequest:
    """The body of `create_order`. Prices are PER DAY in `currency`, as the API takes them.

    `spot_price_per_day` set makes a spot order. No `ssh_password` (keys only) and no
    `required_price` (a client renting for real saw opaque code-1 failures with it set).
    `autossh_entrypoint` makes Clore's own entrypoint run sshd with `ssh_key` before the image's:
    without it only images that run their own sshd (`cloreai/*`) answer SSH.
    """

    server_id: int
    image: str
    currency: str
    spot_price_per_day: float | None = None
    ports: Mapping[str, str] = field(default_factory=lambda: {"22": "tcp"})
    env: Mapping[str, str] = field(default_factory=dict)
    ssh_key: str | None = None
    command: str | None = None
    autossh_entrypoint: bool = True
    # This create's tag: asked for as the order's HTTP port, which `my_orders` echoes as
    # `http_port`, the proof that the order is this create's (see ownership).
    tag: int = field(default_factory=new_tag)

    def __post_init__(self) -> None:
        # An `&` in an env value reproducibly gets HTTP 500 / code 1 (G-gv): refuse it up front.
        bad = sorted(k for k, v in self.env.items() if "&" in v)
        if bad:
            raise ValueError(f"Clore rejects '&' in env values: {', '.join(bad)}")

    def body(self) -> Json:
        body: Json = {
            "renting_server": self.server_id,
            "type": "spot" if self.spot_price_per_day is not None else "on-demand",
            "currency": self.currency,
            "image": self.image,
            "ports": {**self.ports, str(self.tag): "http"},
        }
        if self.spot_price_per_day is not None:
            body["spotprice"] = self.spot_price_per_day
        optional = {"env": dict(self.env), "ssh_key": self.ssh_key, "command": self.command}
        body.update({k: v for k, v in optional.items() if v})
        if self.autossh_entrypoint and self.ssh_key:
            body["autossh_entrypoint"] = True
        return body


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
        self._key = _Secret(api_key)
        self.base_url = base_url.rstrip("/")
        self.limiter = limiter or DEFAULT_LIMITER
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.recover_delays_s = tuple(recover_delays_s)
        self.follow_up_delays_s = tuple(follow_up_delays_s)
        self.clock_offset = OffsetMeter()  # the API's clock against ours, from its replies
        self._session = session or requests.Session()
        self._rng = rng or random.Random()
        # Told before each retried read waits (endpoint, error, wait, next try's number), so an
        # interactive command can say why nothing shows yet.
        self.on_retry: Callable[[str, e.CloreApiError, float, int], None] | None = None
        # Told when a read that could have been retried is given up (endpoint, error, seconds
        # spent on it), so a command can say so once, and a run's reports can too.
        self.on_give_up: Callable[[str, e.CloreApiError, float], None] | None = None
        # Told every reply a read got (endpoint, query, the reply as sent), so the canary can
        # keep what the market really answered (`doctor --canary --capture`).
        self.on_reply: Callable[[str, Mapping[str, str] | None, Json], None] | None = None

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

    # --- endpoints -------------------------------------------------------------------------

    def marketplace(self) -> Marketplace:
        """Every server on the market. Entries that do not parse are skipped and counted."""
        reply = self._read("GET", "marketplace")
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
        reply = self._read("GET", "my_orders", params=params)
        orders = []
        for raw in _list(reply.get("orders")):
            try:
                orders.append(Order.model_validate(raw))
            except ValidationError:
                # Only an order without an int id lands here: nothing could cancel it anyway.
                log.warning("skipping a my_orders entry without a usable id")
        return orders

    def wallets(self) -> list[Wallet]:
        reply = self._read("GET", "wallets")
        return [Wallet.model_validate(w) for w in _list(reply.get("wallets"))]

    def renter_fees(self) -> RenterFees:
        """This account's renter fee rates and creation fees."""
        return RenterFees.model_validate(self._read("GET", "renter_fees"))

    def spot_marketplace(self, server_id: int) -> SpotMarket:
        """The spot book of one server (bids and minimum prices are per day)."""
        reply = self._read("GET", "spot_marketplace", params={"market": str(server_id)})
        market = reply.get("market")
        fields = market if isinstance(market, dict) else {}
        return SpotMarket.model_validate({**fields, "exists": reply.get("exists", True)})

    def set_spot_price(self, order_id: int, price_per_day: float) -> None:
        """Change a spot bid (per day, order currency). Retried only on rate limits: a lost
        reply to a successful lowering would turn a retry into `can_lower_every_600_seconds`."""
        body = {"order_id": order_id, "desired_price": price_per_day}
        self._read(
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
        self._read("POST", "cancel_order", body=body, abort=abort)

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
        sent: list[float] = []

        def mark_sent() -> None:
            sent.append(self.limiter.clock.time())
            if journal is not None:
                journal.sent(sent[0], self.clock_offset.current(), request.tag)

        try:
            self._create_once_admitted(request, abort, mark_sent)
        except e.CloreApiError as exc:
            if not sent:
                raise
            claim = self._claim(request, sent[0], journal)
            if not may_have_created(exc):
                raise
            order, verdict = self._recover(claim, taken, cause=exc)
            if order is None and verdict is not None and verdict.maybe:
                maybe = tuple(o.id for o in verdict.maybe)
                raise e.OrderOutcomeUnknownError(
                    f"create_order on server {request.server_id} failed ({exc.message}), and "
                    f"order {', '.join(map(str, maybe))} on it may be ours: none was proven",
                    server_id=request.server_id,
                    endpoint="create_order",
                    hint="`clore-run cleanup --cancel-unproven` cancels it when no other run "
                    "uses this API key",
                    maybe_ours=maybe,
                    why=verdict.describe(),
                ) from exc
            if order is None:
                exc.message += (
                    f"; no order for server {request.server_id} appeared in my_orders "
                    f"within {sum(self.recover_delays_s):.0f} s that is provably ours, so it "
                    "was most likely not created"
                )
                raise
            log.warning(
                "create_order on server %s answered %s, yet order %s exists: using it",
                request.server_id,
                type(exc).__name__,
                order.id,
            )
            return order
        claim = self._claim(request, sent[0], journal, accepted=True)
        order, verdict = self._recover(claim, taken, cause=None)
        if order is None:
            order, verdict = self._follow_up(claim, taken)
        if order is None:
            maybe = tuple(o.id for o in verdict.maybe) if verdict is not None else ()
            seen = f" (maybe ours: order {', '.join(map(str, maybe))})" if maybe else ""
            waited = sum(self.recover_delays_s) + sum(self.follow_up_delays_s)
            raise e.OrderOutcomeUnknownError(
                f"create_order on server {request.server_id} was accepted, but no order on it "
                f"was proven ours in my_orders within {waited:.0f} s{seen}",
                server_id=request.server_id,
                endpoint="create_order",
                hint="a billed server exists: `clore-run cleanup --cancel-unproven` cancels it "
                "when no other run uses this API key",
                accepted=True,
                maybe_ours=maybe,
                why=verdict.describe() if verdict is not None else "",
            )
        return order

    def _follow_up(
        self, claim: Claim, taken: Collection[int]
    ) -> tuple[Order | None, Verdict | None]:
        """An accepted create's order not proven ours yet: look longer, backing off, saying so
        (the API may list it late, or stamp it late). A read failing here ends nothing."""
        if not self.follow_up_delays_s:
            return None, None
        log.warning(
            "server %s: the create was accepted, its order is not proven ours yet: still "
            "looking for up to %.0f s",
            claim.server_id,
            sum(self.follow_up_delays_s),
        )
        try:
            return self._recover(claim, taken, cause=None, delays_s=self.follow_up_delays_s)
        except e.OrderOutcomeUnknownError:  # my_orders unreadable to the end: still unproven
            return None, None

    def _claim(
        self,
        request: OrderRequest,
        sent_unix_s: float,
        journal: CreateJournal | None,
        accepted: bool = False,
    ) -> Claim:
        """What this create can be known by, now that it was answered (or failed)."""
        answered = self.limiter.clock.time()
        if journal is not None:
            journal.answered(answered, accepted)
        spot = request.spot_price_per_day is not None
        return Claim(
            server_id=request.server_id,
            sent_unix_s=sent_unix_s,
            answered_unix_s=answered,
            offset=self.clock_offset.current(),
            tag=request.tag,
            image=request.image,
            currency=request.currency,
            spot=spot,
            spot_price_per_day=request.spot_price_per_day,
        )

    def _create_once_admitted(
        self,
        request: OrderRequest,
        abort: threading.Event | None,
        before_send: Callable[[], None],
    ) -> None:
        """Send the create; a refusal for the rate limit (HTTP 429 / code 5) rented nothing, so
        it is sent again to the same server after a wait that every caller shares, a bounded
        number of times. Any other failure is the caller's to judge. `before_send` runs before
        each send (the first one's time opens the ownership window)."""
        for attempt in range(CREATE_RATE_LIMIT_RETRIES + 1):
            try:
                self._call(
                    "POST",
                    "create_order",
                    body=request.body(),
                    create=True,
                    abort=abort,
                    before_send=before_send,
                )
                return
            except e.RateLimitedError as exc:
                if attempt == CREATE_RATE_LIMIT_RETRIES:
                    raise
                wait_s = max(CREATE_RATE_LIMIT_WAIT_S * (attempt + 1), exc.retry_after_s or 0.0)
                log.info("create_order refused by the rate limit; again in %.0f s", wait_s)
                self.limiter.back_off(wait_s)

    # --- plumbing --------------------------------------------------------------------------

    def _recover(
        self,
        claim: Claim,
        taken: Collection[int],
        cause: e.CloreApiError | None,
        delays_s: Sequence[float] | None = None,
    ) -> tuple[Order | None, Verdict | None]:
        """Wait with backoff for this create's order to show in my_orders: the order, or None
        and the last look's verdict. A read that fails (after its own retries) does not end
        the search: the order may well exist, and giving up on it would leave it booting,
        billed, for `cleanup`."""
        failed: e.CloreApiError | None = None
        verdict: Verdict | None = None
        for delay in self.recover_delays_s if delays_s is None else delays_s:
            self.limiter.clock.sleep(delay)
            try:
                orders = self.my_orders()
            except e.CloreApiError as exc:
                failed = exc
                continue
            failed = None
            verdict = find_ours(orders, claim, taken)
            if verdict.order is not None and not verdict.order.expired:
                return verdict.order, verdict
            if cause is None:  # our create succeeded: the tag may just not be listed yet
                found = after_success(orders, claim, taken)
            else:  # it failed: our tag alone, on an order stamped late
                found = tagged_late(orders, claim, taken)
            if found is not None:
                return found, verdict
            if verdict.not_ours:
                log.info("server %s: not our order: %s", claim.server_id, verdict.describe())
        if failed is not None:
            raise e.OrderOutcomeUnknownError(
                f"could not check my_orders after create_order on server "
                f"{claim.server_id}: {failed.message}",
                server_id=claim.server_id,
                endpoint="create_order",
                hint="a billed server may exist: run `clore-run cleanup`",
                accepted=cause is None,
            ) from (cause or failed)
        return None, verdict

    def _read(
        self,
        method: str,
        endpoint: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Json | None = None,
        retry_if: Callable[[e.CloreApiError], bool] | None = None,
        abort: threading.Event | None = None,
    ) -> Json:
        """A call that may be repeated: retried while `retry_if` (default: retryable) holds."""
        should_retry = retry_if or (lambda x: x.retryable)
        clock = self.limiter.clock
        started = clock.now()
        for attempt in range(self.retry.max_attempts):
            try:
                # The first send is never given up: only the waits before retries are.
                wait_on = abort if attempt else None
                reply = self._call(method, endpoint, params=params, body=body, abort=wait_on)
                if self.on_reply is not None:
                    self.on_reply(endpoint, params, reply)
                return reply
            except e.CloreApiError as exc:
                delay = self.retry.delay_s(attempt, exc, self._rng)
                last = attempt + 1 >= self.retry.max_attempts
                if not should_retry(exc):
                    raise
                if last or clock.now() - started + delay > self.retry.max_total_s:
                    spent_s = clock.now() - started
                    if attempt > 0:  # it was waited for: say how long
                        exc.message += f"; gave up after {spent_s:.0f} s"
                    if self.on_give_up is not None:
                        self.on_give_up(endpoint, exc, spent_s)
                    raise
                log.info("clore %s: %s; retrying in %.1f s", endpoint, exc.message, delay)
                if self.on_retry is not None:
                    self.on_retry(endpoint, exc, delay, attempt + 2)
                self.limiter.back_off(delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _call(
        self,
        method: str,
        endpoint: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Json | None = None,
        create: bool = False,
        abort: threading.Event | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> Json:
        """Exactly one HTTP request, under the limiter, mapped to a reply or a typed error.
        `before_send` runs once the slot is ours, right before the request goes out; if it
        raises, nothing is sent."""
        clock = self.limiter.clock
        with self.limiter.slot(create=create, abort=abort):
            if before_send is not None:
                before_send()
            sent_at = clock.time()
            try:
                response = self._session.request(
                    method,
                    f"{self.base_url}/{endpoint}",
                    params=params,
                    json=body,
                    headers={"auth": self._key.reveal()},
                    timeout=self.timeout_s,
                    # requests drops only `Authorization` when a redirect leaves the host: our
                    # custom `auth` header (the key) would follow it anywhere, even to http.
                    allow_redirects=False,
                )
            except requests.RequestException as exc:
                raise self._transport_error(endpoint, exc) from None
            self.clock_offset.observe(response.headers.get("Date"), sent_at, clock.time())
        reply = self._parse(endpoint, response)
        log.debug("clore %s %s -> http %s code 0", method, endpoint, response.status_code)
        return reply

    def _transport_error(self, endpoint: str, exc: requests.RequestException) -> e.TransportError:
        """The failure in words (a person reads it); requests' nested text goes to the debug
        log only."""
        log.debug("clore %s: %s", endpoint, self._key.redact(str(exc))[:500])
        return e.TransportError(
            self._key.redact(
                f"{e.about(endpoint)}: cannot reach {self.base_url}: {cause_in_words(exc)}"
            ),
            endpoint=endpoint,
            cause=cause_in_words(exc),
            hint="check the network, or CLORE_API_URL",
        )

    def _parse(self, endpoint: str, response: requests.Response) -> Json:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            snippet = console_line(" ".join(response.text.split())[:200])
            raise e.NonJsonReplyError(
                f"{e.about(endpoint)}: HTTP {response.status_code} with a non-JSON reply: "
                f"{self._key.redact(snippet)!r}",
                endpoint=endpoint,
                http_status=response.status_code,
            )
        code = _int_or_none(data.get("code"))
        if code == 0:
            return data
        raise map_error(endpoint, data, code, response.status_code, self._key.redact, response)


def map_error(
    endpoint: str,
    reply: Json,
    code: int | None,
    http_status: int,
    redact: Callable[[str], str] = lambda s: s,
    response: requests.Response | None = None,
) -> e.CloreApiError:
    """The typed error for a reply whose `code` is not 0 (code first, HTTP status as fallback)."""
    common: dict[str, Any] = {
        "endpoint": endpoint,
        "code": code,
        "http_status": http_status,
        "reply": reply,
    }
    if code == 6:
        text = redact(str(reply.get("error", "")))
        app_cls = e.ERROR_STRINGS.get(text, e.ApplicationError)
        # The API's own words: text from a machine we do not control, shown as one safe line.
        msg = f"{e.about(endpoint)}: {console_line(text) or 'application error'} (code 6)"
        return app_cls(msg, error=text, hint=e.HINTS.get(app_cls, ""), **common)
    if code == 5 or (code is None and http_status == 429):
        return e.RateLimitedError(
            f"{e.about(endpoint)}: rate limit exceeded (code {code}, HTTP {http_status})",
            retry_after_s=_retry_after(response),
            hint=e.HINTS[e.RateLimitedError],
            **common,
        )
    if code in e.CODES:
        cls, meaning = e.CODES[code]
        hint = e.HINTS.get(cls, "")
        if cls is e.InvalidTokenError:  # the same refusal whichever call met it first
            return cls(f"{e.REFUSED_KEY} (code {code}: {meaning})", hint=hint, **common)
        return cls(f"{e.about(endpoint)}: {meaning} (code {code})", hint=hint, **common)
    return e.UnknownCodeError(
        f"{e.about(endpoint)}: unexpected reply (code {code}, HTTP {http_status})",
        retryable=http_status >= 500,  # a 5xx without a known code looks like an outage
        **common,
    )


def may_have_created(exc: e.CloreApiError) -> bool:
    """Failures after which the order may exist. Codes 2-6 are refusals: nothing was created."""
    ambiguous = (e.DatabaseError, e.NonJsonReplyError, e.TransportError, e.UnknownCodeError)
    return isinstance(exc, ambiguous)


def _retry_after(response: requests.Response | None) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(value) if value else None
    except ValueError:
        return None  # an HTTP date: rare, and our own backoff is long enough


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
