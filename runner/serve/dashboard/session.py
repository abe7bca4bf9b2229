"""The dashboard's login session and its CSRF token, signed with a key derived from the API token.

A session is a signed cookie, not a server-side row: `<expires>.<nonce>.<mac>`. Every instance
that knows the token can check it, a restart keeps people logged in, and changing the token
logs everybody out. The cookie is HttpOnly (page scripts never see it) and SameSite=Strict (a
request another site starts does not carry it). A logout is the one thing kept on the server:
in the queue's store (`Ended`), which every check reads, so a copy of a logged-out cookie stays
dead after a restart and on every instance sharing the store.

The CSRF token is a second MAC over the session's nonce, sent in the page and checked on every
POST. SameSite=Strict alone would do in today's browsers; the token also covers older ones and
a same-site page on another port of the same host, which SameSite does not tell apart.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Protocol

from runner.clock import SYSTEM_CLOCK, Clock
from runner.errors import InfrastructureError

COOKIE = "clore_run_session"
SESSION_S = 12 * 3600.0  # a working day; then log in again
_KEY_LABEL = b"clore-run dashboard session v1"


@dataclass(frozen=True)
class Session:
    nonce: str
    expires: float


class Ended(Protocol):
    """Where logouts are kept: the queue's store (both kinds have these two methods)."""

    def end_session(self, nonce: str, expires: float, now: float) -> None: ...

    def session_ended(self, nonce: str) -> bool: ...


class EndedInMemory:
    """Logouts this process alone knows: for a Sessions without a store (tests, tools)."""

    def __init__(self) -> None:
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()

    def end_session(self, nonce: str, expires: float, now: float) -> None:
        with self._lock:
            self._ended = {n: e for n, e in self._ended.items() if e > now}
            self._ended[nonce] = expires

    def session_ended(self, nonce: str) -> bool:
        with self._lock:
            return nonce in self._ended


class Sessions:
    """Issues and checks session cookies and CSRF tokens for one API token."""

    def __init__(self, token: str, clock: Clock = SYSTEM_CLOCK, ended: Ended | None = None) -> None:
        self._token = token.encode()
        self._key = hmac.new(self._token, _KEY_LABEL, hashlib.sha256).digest()
        self._clock = clock
        self._store: Ended = ended if ended is not None else EndedInMemory()
        self._ended = EndedInMemory()  # those known here: asked of the store once

    def token_is_right(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self._token)

    def issue(self) -> tuple[str, Session]:
        """A new cookie value and the session it stands for."""
        session = Session(secrets.token_urlsafe(16), self._clock.time() + SESSION_S)
        body = f"{session.expires:.0f}.{session.nonce}"
        return f"{body}.{self._mac('session', body)}", session

    def check(self, cookie: str | None) -> Session | None:
        """The session a cookie stands for, or None (absent, forged, expired, logged out).
        Reads the store: call it off the event loop. A store that cannot be read says no."""
        session = self.signed(cookie)
        if session is None:
            return None
        try:
            ended = self._store.session_ended(session.nonce)
        except InfrastructureError:
            return None
        if ended:
            self._ended.end_session(session.nonce, session.expires, self._clock.time())
            return None
        return session

    def signed(self, cookie: str | None) -> Session | None:
        """`check` without the store: signed by us, not expired, not logged out as far as this
        process knows. Enough to let a request's body be read; never to serve a page."""
        if not cookie or cookie.count(".") != 2:
            return None
        expires, nonce, mac = cookie.split(".")
        if not hmac.compare_digest(mac, self._mac("session", f"{expires}.{nonce}")):
            return None
        if not expires.isdigit() or float(expires) <= self._clock.time():
            return None
        if self._ended.session_ended(nonce):
            return None
        return Session(nonce, float(expires))

    def end(self, session: Session) -> None:
        """Logged out: the cookie stops working here and, through the store, on every instance
        and after a restart, even if a copy of it is kept."""
        now = self._clock.time()
        self._ended.end_session(session.nonce, session.expires, now)
        self._store.end_session(session.nonce, session.expires, now)

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.nonce)

    def csrf_is_right(self, session: Session, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.csrf(session).encode())

    def _mac(self, purpose: str, text: str) -> str:
        return hmac.new(self._key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()
