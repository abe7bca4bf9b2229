"""One HTTP call to the Clore API, as it really behaves: judged by its JSON `code` first (the
HTTP status only fills in when there is none), under one serial `RateLimiter`, mapped to a typed
error in one place; reads retried with backoff and jitter, bounded in attempts and total time.

The API key lives in one private object; it is sent per request and redacted from any text that
ends up in an exception or a log line.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from runner.backends.clore import errors as e
from runner.backends.clore.ownership import OffsetMeter
from runner.backends.clore.ratelimit import RateLimiter
from runner.transport_words import cause_in_words
from runner.untrusted import console_line

log = logging.getLogger(__name__)

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


@dataclass
class ReadHooks:
    """Who hears about reads; each is optional and may be set or cleared at any time."""

    # Told before each retried read waits (endpoint, error, wait, next try's number), so an
    # interactive command can say why nothing shows yet.
    on_retry: Callable[[str, e.CloreApiError, float, int], None] | None = None
    # Told when a read that could have been retried is given up (endpoint, error, seconds
    # spent on it), so a command can say so once, and a run's reports can too.
    on_give_up: Callable[[str, e.CloreApiError, float], None] | None = None
    # Told every reply a read got (endpoint, query, the reply as sent), so the canary can
    # keep what the market really answered (`doctor --canary --capture`).
    on_reply: Callable[[str, Mapping[str, str] | None, Json], None] | None = None


class Transport:
    """Calls to one API base URL with one key. Thread-safe as far as the limiter goes."""

    def __init__(
        self,
        api_key: str,
        base_url: str,
        limiter: RateLimiter,
        timeout_s: float | tuple[float, float],
        retry: RetryPolicy,
        session: requests.Session,
        rng: random.Random,
    ) -> None:
        self._key = _Secret(api_key)
        self.base_url = base_url.rstrip("/")
        self.limiter = limiter
        self.timeout_s = timeout_s
        self.retry = retry
        self.clock_offset = OffsetMeter()  # the API's clock against ours, from its replies
        self.hooks = ReadHooks()
        self._session = session
        self._rng = rng

    def read(
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
                reply = self.call(method, endpoint, params=params, body=body, abort=wait_on)
                if self.hooks.on_reply is not None:
                    self.hooks.on_reply(endpoint, params, reply)
                return reply
            except e.CloreApiError as exc:
                delay = self.retry.delay_s(attempt, exc, self._rng)
                last = attempt + 1 >= self.retry.max_attempts
                if not should_retry(exc):
                    raise
                if last or clock.now() - started + delay > self.retry.max_total_s:
                    self._give_up(endpoint, exc, clock.now() - started, attempt)
                    raise
                log.info("clore %s: %s; retrying in %.1f s", endpoint, exc.message, delay)
                if self.hooks.on_retry is not None:
                    self.hooks.on_retry(endpoint, exc, delay, attempt + 2)
                self.limiter.back_off(delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _give_up(self, endpoint: str, exc: e.CloreApiError, spent_s: float, attempt: int) -> None:
        if attempt > 0:  # it was waited for: say how long
            exc.message += f"; gave up after {spent_s:.0f} s"
        if self.hooks.on_give_up is not None:
            self.hooks.on_give_up(endpoint, exc, spent_s)

    def call(
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
