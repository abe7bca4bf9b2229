"""A small HTTP client for the queue's API (requests: already a dependency, no extra needed)."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import requests

from runner.errors import CloreRunError, InfrastructureError, UsageError
from runner.serve import DEFAULT_SERVER

TIMEOUT_S = 30.0
UNREACHABLE = "is `clore-run serve` running there? Check --server (or CLORE_RUN_SERVER)"
BAD_TOKEN = "set CLORE_RUN_TOKEN to the token `clore-run serve` was started with"


class ClientError(UsageError):
    """The server refused the request (4xx): exit 2. `body` is its JSON reply."""

    def __init__(self, message: str, body: Any = None, hint: str = "") -> None:
        super().__init__(message, hint)
        self.body = body


class Client:
    def __init__(self, server: str, token: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.token = token if token is not None else os.environ.get("CLORE_RUN_TOKEN", "")
        self.session = requests.Session()
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"

    def submit_pipeline(
        self, text: str, after: Sequence[str] = (), trust: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"after": list(after)}
        if trust is not None:
            params["trust"] = trust
        return self._call(
            "POST",
            "/pipelines",
            data=text.encode("utf-8"),
            params=params,
            headers={"Content-Type": "application/yaml"},
        )

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{_quote(job_id)}")

    def jobs(self, status: str | None = None, after: int = 0, limit: int = 100) -> dict[str, Any]:
        params: dict[str, Any] = {"after": after, "limit": limit}
        if status is not None:
            params["status"] = status
        return self._call("GET", "/jobs", params=params)

    def log(self, job_id: str, follow: bool = False, offset: int | None = None) -> Iterator[bytes]:
        """The job's log as it comes; following, until the job settles (no read timeout: a
        quiet job sends nothing for as long as it is quiet). With `offset`, from that byte
        on, the log's bytes only (no notes while the job waits)."""
        timeout = (TIMEOUT_S, None) if follow else TIMEOUT_S
        path = f"/jobs/{_quote(job_id)}/log"
        params = {"follow": "true" if follow else "false"}
        if offset is not None:
            params["offset"] = str(offset)
        try:
            reply = self.session.get(
                self.server + path,
                params=params,
                timeout=timeout,
                stream=True,
            )
        except requests.RequestException as exc:
            raise InfrastructureError(
                f"cannot reach {self.server}: {_short(exc)}", UNREACHABLE
            ) from None
        with reply:
            if reply.status_code >= 400:
                self._check(reply, _json(reply))
            try:
                yield from reply.iter_content(chunk_size=None)
            except requests.RequestException as exc:
                raise InfrastructureError(
                    f"{self.server}: the log stream broke: {_short(exc)}"
                ) from None

    def artifact(self, job_id: str, name: str) -> bytes | None:
        """A file the job kept, None when it has no such file (404)."""
        path = f"/jobs/{_quote(job_id)}/artifacts/{urllib.parse.quote(name)}"
        try:
            reply = self.session.get(self.server + path, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise InfrastructureError(
                f"cannot reach {self.server}: {_short(exc)}", UNREACHABLE
            ) from None
        if reply.status_code == 404:
            return None
        if reply.status_code >= 400:
            self._check(reply, _json(reply))
        return reply.content

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/jobs/{_quote(job_id)}")

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            reply = self.session.request(method, self.server + path, timeout=TIMEOUT_S, **kwargs)
        except requests.RequestException as exc:
            raise InfrastructureError(
                f"cannot reach {self.server}: {_short(exc)}", UNREACHABLE
            ) from None
        body = _json(reply)
        self._check(reply, body)
        if not isinstance(body, dict):
            raise InfrastructureError(f"{self.server} did not answer with JSON")
        return body

    def _check(self, reply: requests.Response, body: Any) -> None:
        if reply.status_code >= 500:
            raise InfrastructureError(
                f"{self.server} answered {reply.status_code}: {_detail(body)}"
            )
        if reply.status_code == 401:
            raise ClientError(
                f"{self.server} refused the token (401): {_detail(body)}", body, BAD_TOKEN
            )
        if reply.status_code >= 400:
            raise ClientError(f"{reply.status_code}: {_detail(body)}", body)


def _quote(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")


def _json(reply: requests.Response) -> Any:
    try:
        return reply.json()
    except ValueError:
        return reply.text


def _detail(body: Any) -> str:
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        if isinstance(detail, list):
            return "; ".join(_item(d) for d in detail)
        return str(detail)
    return str(body)[:200]


def _item(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    where = key_path(item.get("loc", []))
    hint = f" ({item['hint']})" if item.get("hint") else ""
    return f"{where}: {item.get('msg', '')}{hint}"


def key_path(loc: Any) -> str:
    """A reply's `loc` (["body", "needs", 0]) spelt as `validate` spells key paths:
    `needs[0]` (where in the request it was, "body" or "query", is said by the route)."""
    # the loader's key paths: only for a refused request
    from runner.spec.diagnostics import format_path

    parts = [p for p in loc if isinstance(p, (str, int))] if isinstance(loc, list) else []
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return format_path(tuple(parts))


def _short(exc: Exception) -> str:
    """The reason in words, never requests' nested text (a person reads it)."""
    # requests' exception types: only for a failed request
    from runner.transport_words import cause_in_words

    return cause_in_words(exc)


__all__ = ["DEFAULT_SERVER", "Client", "ClientError", "CloreRunError"]
