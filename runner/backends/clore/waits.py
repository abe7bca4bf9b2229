"""What a person is told while the Clore API does not answer, and what a run's reports keep.

A read the client retries (the API down, a wrong CLORE_API_URL, no network) can take half a
minute and more before it is given up. Every command that reads the API attaches an `ApiWaits`
to its client, so each wait is one line as it starts: the reason in words and when it is tried
again. The error a read given up raises says the rest (the client adds how long it tried); a
run's reports keep it as a warning.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from runner.backends.clore import errors as e

if TYPE_CHECKING:
    from runner.backends.clore.api import CloreClient

Say = Callable[[str], None]


class ApiWaits:
    """Says each retried read; keeps the reads given up for the reports."""

    def __init__(self, say: Say, tries: int) -> None:
        self.say = say
        self.tries = tries
        self._gave_up: dict[str, str] = {}  # endpoint -> the error, the first time only

    @classmethod
    def attach(cls, client: CloreClient, say: Say) -> ApiWaits:
        waits = cls(say, client.retry.max_attempts)
        client.hooks.on_retry = waits.retrying
        client.hooks.on_give_up = waits.gave_up
        return waits

    def retrying(self, endpoint: str, exc: e.CloreApiError, wait_s: float, next_try: int) -> None:
        self.say(
            f"{e.about(endpoint)}: {why(exc)}; trying again in {wait_s:.0f} s "
            f"(try {next_try} of {self.tries})"
        )

    def gave_up(self, endpoint: str, exc: e.CloreApiError, _spent_s: float) -> None:
        self._gave_up.setdefault(endpoint, str(exc))

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per endpoint given up, for summary.json's `warnings`."""
        return tuple(self._gave_up.values())


def on_stderr(client: CloreClient) -> ApiWaits:
    """The waits of a command that prints as it goes (offers, doctor, plan, cleanup, pool)."""
    return ApiWaits.attach(client, lambda line: print(line, file=sys.stderr, flush=True))


def why(exc: e.CloreApiError) -> str:
    """The reason of a failed call without the 'Clore API endpoint: ' every message starts with."""
    if isinstance(exc, e.TransportError):
        return exc.cause
    return exc.message.removeprefix(f"{e.about(exc.endpoint)}: ")
