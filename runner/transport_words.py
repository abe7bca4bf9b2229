"""Why an HTTP request got no answer, in a few words a person reads.

requests wraps urllib3, which wraps the socket error, and its text nests all three
(`HTTPSConnectionPool(host=…): Max retries exceeded … NameResolutionError(…)`). The one reason
that matters is found here by type and errno, once, for every place that talks HTTP (the Clore
API client, `serve`'s client commands); the library's text goes to the debug log only.
"""

from __future__ import annotations

import errno
import socket

_MAX_LINKS = 12  # exceptions wrap a handful deep; a loop in a chain must still end

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "the connection was reset",
    errno.ENETUNREACH: "the network is unreachable",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ETIMEDOUT: "no answer (timed out)",
    errno.ECONNABORTED: "the connection was aborted",
    errno.EPIPE: "the connection was closed",
}


def cause_in_words(exc: BaseException) -> str:
    """The reason a request failed, without the library's wording: 'connection refused',
    'the host name does not resolve', 'no answer (timed out)'."""
    import requests  # requests: only when a request failed (the exception types to tell apart)

    if isinstance(exc, requests.Timeout):
        return "no answer (timed out)"
    if isinstance(exc, requests.exceptions.SSLError):
        return "the TLS handshake failed (certificate or protocol)"
    if isinstance(exc, requests.exceptions.InvalidURL | requests.exceptions.MissingSchema):
        return "the URL is not valid"
    if isinstance(exc, requests.exceptions.InvalidSchema):
        return "the URL must start with http:// or https://"
    if isinstance(exc, requests.TooManyRedirects):
        return "too many redirects"
    for link in _chain(exc):
        words = _link_words(link)
        if words:
            return words
    return "the connection failed"


def _link_words(link: BaseException) -> str:
    if isinstance(link, socket.gaierror) or type(link).__name__ == "NameResolutionError":
        return "the host name does not resolve"
    if isinstance(link, OSError) and link.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[link.errno]
    if isinstance(link, TimeoutError) or "TimeoutError" in type(link).__name__:
        return "no answer (timed out)"
    if type(link).__name__ in ("RemoteDisconnected", "ProtocolError"):
        return "the server closed the connection without an answer"
    return ""


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (arguments, urllib3's `reason`, causes), breadth first."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < _MAX_LINKS:
        link = todo.pop(0)
        if any(link is s for s in seen):
            continue
        seen.append(link)
        wrapped = [a for a in getattr(link, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(link, "reason", None)
        if isinstance(reason, BaseException):
            wrapped.append(reason)
        wrapped += [c for c in (link.__cause__, link.__context__) if c is not None]
        todo += wrapped
    return seen
