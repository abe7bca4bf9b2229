"""The host history's rows and rules, written once for both halves (runner/stores/hosts/sqlite.py
and runner/stores/hosts/postgres.py), as the ledger's are: a half says how it runs a statement
and what its messages call it."""

from __future__ import annotations

from typing import Any

from runner.core.hosts import EVENT_KINDS, HostEvent, HostMemory
from runner.errors import InfrastructureError
from runner.stores.sql import RowStore

KEEP_S = 30 * 86400.0  # a host's month-old boots say little about it today


class HostHistoryError(InfrastructureError):
    """The host history cannot be opened, read or written."""


class HostHistory(RowStore):
    """The history's rows and rules, for both halves: a half gives what every `RowStore` half
    does (`_transact`, failures as HostHistoryError; `where`; `close`)."""

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
            "read host events", lambda execute: execute(query + " ORDER BY at", args).fetchall()
        )
        return [
            HostEvent(str(h), k, float(at), b, str(r), str(i), p) for h, k, at, b, r, i, p in rows
        ]

    def memory(self) -> HostMemory:
        """The history as of now, for the rules of runner/core/hosts.py."""
        return HostMemory.of(self.events(), self._clock.time())

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
