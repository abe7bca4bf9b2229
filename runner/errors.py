"""Exceptions a user may see, each mapped to an exit code by the CLI's one error boundary."""

from __future__ import annotations

from collections.abc import Iterable


class CloreRunError(Exception):
    """Base: a message meant for a human, and the exit code it maps to."""

    exit_code = 3

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(CloreRunError):
    """Invalid pipeline, flag or argument: exit 2."""

    exit_code = 2


class InfrastructureError(CloreRunError):
    """Auth, API down, no offer fits, budget exceeded, SSH unreachable: exit 3."""

    exit_code = 3


class JobCannotRun(InfrastructureError):
    """This job cannot get a place now or later (no offer fits, over budget): it ends as
    `error` without retries; the rest of the run goes on."""


class RunMustStop(InfrastructureError):
    """Nothing else can succeed either (the API key is refused, the balance is empty): the run
    is cancelled and exits 3."""


class LocalFault(JobCannotRun):
    """Our side failed, not a server: a workspace file gone or unreadable while it was sent,
    the output folder's disk full. The job fails once with the cause (exit 3): another server
    would fail the same way, and each would cost its fee."""


def local_fault_from(exc: OSError, doing: str) -> LocalFault:
    """`exc` (from a local file) as a LocalFault saying what we were doing."""
    what = exc.strerror or str(exc)
    where = f" {exc.filename}" if exc.filename else ""
    return LocalFault(f"on this machine: {doing}{where}: {what}")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint naming the closest choice, or "" when nothing is close."""
    import difflib  # only a mistake pays for it

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""
