"""The host history's rows and rules, written once for both halves (runner/stores/hosts/sqlite.py
and runner/stores/hosts/postgres.py), as the ledger's are: a half says how it runs a statement
and what its messages call it."""

from __future__ import annotations

import math
from typing import Any, Literal

from runner.core.hosts import EVENT_KINDS, HostEvent, HostMemory
from runner.errors import InfrastructureError
from runner.stores.sql import RowStore

KEEP_S = 30 * 86400.0  # a host's month-old boots say little about it today
MAX_ROWS = 200_000  # far past a month of boots: a file with more is not read whole
FUTURE_SKEW_S = 300.0  # clocks differ a little; a row further in the future is ignored


class HostHistoryError(InfrastructureError):
    """The host history cannot be opened, read or written."""


class HostHistory(RowStore):
    """The history's rows and rules, for both halves: a half gives what every `RowStore` half
    does (`_transact`, failures as HostHistoryError; `where`; `close`)."""

    _notes: list[str] | None = None  # warnings for a person (rows ignored, a file set aside)

    def record(self, event: HostEvent) -> None:
        """Remember one event of one host."""
        if event.kind not in EVENT_KINDS:
            raise ValueError(f"unknown host event {event.kind!r}; one of {', '.join(EVENT_KINDS)}")
        self._transact(
            "record a host event",
            lambda execute: execute(
                "INSERT INTO host_events (host, kind, at, boot_s, run_id, image, pull_s) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event.host,
                    event.kind,
                    event.at,
                    event.boot_s,
                    event.run_id,
                    event.image,
                    event.pull_s,
                ),
            ),
        )

    def events(self, host: str | None = None) -> list[HostEvent]:
        """Every event remembered (of one host), oldest first."""
        query = "SELECT host, kind, at, boot_s, run_id, image, pull_s FROM host_events"
        args: tuple[Any, ...] = ()
        if host is not None:
            query, args = query + " WHERE host = ?", (host,)
        rows = self._transact(
            "read host events",
            lambda execute: execute(query + f" LIMIT {MAX_ROWS}", args).fetchall(),
        )
        events, ignored = checked_events(rows, self._clock.time())
        if ignored:
            self.note(
                f"{ignored} host history row(s) ignored: wrong types, unknown kinds or times "
                "in the future (the file may have been tampered with)"
            )
        return sorted(events, key=lambda e: e.at)

    def memory(self) -> HostMemory:
        """The history as of now, for the rules of runner/core/hosts.py."""
        return HostMemory.of(self.events(), self._clock.time())

    def note(self, text: str) -> None:
        """Keep a warning for a person, once."""
        if self._notes is None:
            self._notes = []
        if text not in self._notes:
            self._notes.append(text)

    def take_notes(self) -> list[str]:
        """The warnings kept so far, each given out once."""
        notes, self._notes = self._notes or [], []
        return notes

    def clear(self, host: str | None = None) -> int:
        """Forget one host (or every host); how many events went."""
        query, args = "DELETE FROM host_events", tuple[str, ...]()
        if host is not None:
            query, args = query + " WHERE host = ?", (host,)
        return int(self._transact("clear host events", lambda ex: ex(query, args).rowcount))

    def prune(self, older_than_s: float = KEEP_S) -> int:
        """Drop events older than `older_than_s`."""
        cut = self._clock.time() - older_than_s
        return int(
            self._transact(
                "prune host events",
                lambda ex: ex("DELETE FROM host_events WHERE at < ?", (cut,)).rowcount,
            )
        )


def checked_events(rows: list[Any], now: float) -> tuple[list[HostEvent], int]:
    """The rows as events, and how many were ignored. The history may come from a cache a
    pull request's run wrote: every value is checked (SQLite keeps any type in any column)."""
    events: list[HostEvent] = []
    ignored = 0
    for row in rows:
        event = _event(row, now)
        if event is None:
            ignored += 1
        else:
            events.append(event)
    return events, ignored


def _event(row: Any, now: float) -> HostEvent | None:
    try:
        host, kind, at, boot_s, run_id, image, pull_s = row
    except (TypeError, ValueError):
        return None
    if not isinstance(host, str) or not host or kind not in EVENT_KINDS:
        return None
    if not isinstance(run_id, str) or not isinstance(image, str):
        return None
    when, boot, pull = _seconds(at), _duration(boot_s), _duration(pull_s)
    if when is None or boot is False or pull is False or when > now + FUTURE_SKEW_S:
        return None
    return HostEvent(host, kind, when, boot, run_id, image, pull)


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def _duration(value: Any) -> float | Literal[False] | None:
    """None stays None (not recorded); False: not a duration at all."""
    if value is None:
        return None
    seconds = _seconds(value)
    return False if seconds is None else seconds
