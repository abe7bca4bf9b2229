"""A small GitHub REST client: auth, rate-limit replies, pagination by `Link` headers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import requests

from runner.clock import SYSTEM_CLOCK, Clock

TIMEOUT_S = 30
MAX_PAGES = 100  # 10,000 comments: far past any real PR, but bounded
_SECONDARY_WAIT_S = 60.0  # GitHub: wait at least a minute when no retry-after is given


class GitHubError(Exception):
    """A reply that was not a success."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"GitHub API {status}: {message}")
        self.status = status
        self.message = message


class ReadOnly(GitHubError):
    """403 that is not a rate limit: a read-only token (fork PR) or missing permission."""


class RateLimited(GitHubError):
    """Still rate limited after waiting, or asked to wait longer than we are willing to."""


class GitHubApi:
    """Calls the REST API at `base_url`. The clock is injected, so tests never wait."""

    def __init__(
        self,
        base_url: str,
        token: str,
        session: requests.Session | None = None,
        clock: Clock = SYSTEM_CLOCK,
        max_wait_s: float = 120.0,
        tries: int = 3,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session or requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "clore-run",
            }
        )
        self.clock = clock
        self.max_wait_s = max_wait_s
        self.tries = max(1, tries)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON of a successful reply. Raises GitHubError (ReadOnly, RateLimited)."""
        return _json(self.request(method, path, **kwargs))

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = path if path.startswith(self.base_url) else f"{self.base_url}{path}"
        for attempt in range(1, self.tries + 1):
            resp = self.session.request(method, url, timeout=TIMEOUT_S, **kwargs)
            wait = self._retry_wait(resp, attempt, method)
            if wait is None:
                break
            self.clock.sleep(wait)
        if resp.status_code >= 400:
            raise self._error(resp)
        return resp

    def paginate(self, path: str, params: dict[str, str | int]) -> Iterator[Any]:
        """Items of every page, following `Link: rel="next"` within this API only (the token
        must not be sent to a host a reply names)."""
        resp = self.request("GET", path, params=params)
        for _ in range(MAX_PAGES):
            yield from _json(resp)
            next_url = resp.links.get("next", {}).get("url", "")
            if not next_url.startswith(self.base_url + "/"):
                return
            resp = self.request("GET", next_url)

    def _retry_wait(self, resp: requests.Response, attempt: int, method: str) -> float | None:
        """Seconds to wait before trying again, or None to take this reply as it is.

        A gateway error is retried only for a request that can be repeated safely: a POST that
        timed out at the gateway has often been done, and sending it again makes a second one.
        """
        limited = rate_limit_wait(resp, self.clock.time())
        if limited is not None:
            if attempt >= self.tries or limited > self.max_wait_s:
                raise RateLimited(resp.status_code, _message(resp) or "rate limited")
            return limited
        idempotent = method.upper() != "POST"
        if resp.status_code in (502, 503, 504) and idempotent and attempt < self.tries:
            return float(2**attempt)
        return None

    def _error(self, resp: requests.Response) -> GitHubError:
        message = _message(resp) or resp.reason or "error"
        if resp.status_code == 403:
            return ReadOnly(403, message)
        return GitHubError(resp.status_code, message)


def rate_limit_wait(resp: requests.Response, now: float) -> float | None:
    """How long GitHub asks us to wait, or None when this is not a rate-limit reply.

    Primary limits: 403/429 with `x-ratelimit-remaining: 0` (wait until `x-ratelimit-reset`).
    Secondary limits: 403/429 with `retry-after`, or a message saying "rate limit".
    """
    if resp.status_code not in (403, 429):
        return None
    headers = resp.headers
    retry_after = _float(headers.get("retry-after"))
    if retry_after is not None:
        return max(0.0, retry_after)
    if headers.get("x-ratelimit-remaining") == "0":
        reset = _float(headers.get("x-ratelimit-reset"))
        return max(1.0, reset - now + 1.0) if reset is not None else _SECONDARY_WAIT_S
    if resp.status_code == 429 or "rate limit" in _message(resp).lower():
        return _SECONDARY_WAIT_S
    return None


def _json(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise GitHubError(resp.status_code, "reply is not JSON") from exc


def _message(resp: requests.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return ""
    return str(data.get("message", "")) if isinstance(data, dict) else ""


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
