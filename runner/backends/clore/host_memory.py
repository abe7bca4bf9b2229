"""The host history as a Clore run keeps it: what each rental's host did, written as it happens,
and read once at the start of a run for the market the core rents from.

Advice, not a record of money: a history that cannot be read is an empty one, and a write that
fails is dropped (the run says so once), so a damaged `hosts.db` never stops a run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.backends.clore.rental import (
    CancelledBooting,
    NeverOnline,
    Rental,
    SshNeverAnswered,
    StillPulling,
)
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import EventKind, HostEvent, HostMemory, loser_kind
from runner.errors import CloreRunError
from runner.stores.hosts import HostHistory, HostHistoryError


@dataclass
class HostRecorder:
    """Where a run's host events go (`history`: None keeps none) and what it read at start."""

    history: HostHistory | None = None
    run_id: str = ""
    clock: Clock = SYSTEM_CLOCK
    say: Callable[[str], None] = lambda _text: None  # a line for the person watching
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _broken: bool = False

    def memory(self) -> HostMemory:
        """The history as of now (empty without one, or when it cannot be read)."""
        if self.history is None:
            return HostMemory(now=self.clock.time())
        try:
            memory = self.history.memory()
        except HostHistoryError as exc:
            self._give_up(exc)
            return HostMemory(now=self.clock.time())
        for note in self.history.take_notes():
            self.say(f"warning: {note}")
        return memory

    def up(self, rental: Rental) -> None:
        """The rental answered SSH: its create -> SSH seconds, and its image's pull."""
        boot_s = _seconds(rental.facts.get("ssh_ready_after_s"))
        pull_s = _seconds(rental.facts.get("pull_s"))
        self._record(rental.offer.server_id, "up", boot_s, rental.image, pull_s)

    def failed(self, server_id: int, exc: CloreRunError, image: str = "") -> None:
        """A rent failed: kept when it was the host's own doing (never online, no sshd), and
        a pull given up as a pull (the image's time, not a failed boot)."""
        if isinstance(exc, NeverOnline):
            self._record(server_id, "never_up", None, image)
        elif isinstance(exc, SshNeverAnswered):
            self._record(server_id, "ssh_failed", None, image)
        elif isinstance(exc, StillPulling):
            self._record(server_id, "pulling", None, exc.image, exc.pull_s)

    def lost_race(self, server_id: int, exc: CancelledBooting) -> None:
        """A hedge's loser, given back still booting when another host answered SSH: slow
        (not online yet), or a pull, as the core's rule says; not forgotten."""
        kind = loser_kind(exc.waited_s, exc.pulled_s is not None)
        if kind is not None:
            self._record(server_id, kind, exc.waited_s, exc.image, exc.pulled_s)

    def lost(self, server_id: int) -> None:
        """The server went away under a job (outbid, dropped)."""
        self._record(server_id, "preempted", None)

    def _record(
        self,
        server_id: int,
        kind: EventKind,
        boot_s: float | None,
        image: str = "",
        pull_s: float | None = None,
    ) -> None:
        at = self.clock.time()
        event = HostEvent(str(server_id), kind, at, boot_s, self.run_id, image, pull_s)
        try:
            with self._lock:
                if self.history is None or self._broken:
                    return
                self.history.record(event)
        except HostHistoryError as exc:
            self._give_up(exc)

    def _give_up(self, exc: HostHistoryError) -> None:
        with self._lock:
            first, self._broken = not self._broken, True
        if first:
            self.say(f"warning: the host history is not kept this run: {exc}")

    def close(self) -> None:
        """Close the history (its file whole on disk: the action caches it next). A rent
        that ends after this writes nothing."""
        with self._lock:
            history, self.history = self.history, None
        if history is not None:
            history.close()


def _seconds(text: str | None) -> float | None:
    return float(text) if text else None
