"""What the parts of a ServerBook share, pure.

The book is carved into parts (the ends, placing, renting, renting ahead, hedging, giving
back), and each works on the same few things: one fleet, one ranked queue of jobs, one budget,
one list of commands the book answers with, one cap, and whether the book rents at all. They
are made once, in `BookState`, and every part takes them from there, so a new part cannot be
given a different budget or a list of its own that nobody reads. Sharing a part is not
sharing its collections: each part shows them typed read-only (Mapping, Set, Sequence, or a
property) and changes them only in its own methods, so mypy --strict refuses a part that adds
to or takes from another's. The records in them are rows some parts fill in: Ends sets a
job's ends on its `Known`, and a rent or a start sets the quote a `Server` runs under.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.budget import Budget
from runner.core.fleet import Fleet
from runner.core.known_jobs import KnownJobs
from runner.core.rentals import CoreCommand


@dataclass(frozen=True)
class BookState:
    fleet: Fleet
    jobs: KnownJobs
    budget: Budget
    out: list[CoreCommand]  # every part adds its commands here
    cap: int  # servers at once
    renting: bool  # False: hosts that already exist, nothing to rent


class BookPart:
    """A part of the book, over the state every part shares."""

    def __init__(self, state: BookState) -> None:
        self._fleet = state.fleet
        self._jobs = state.jobs
        self._budget = state.budget
        self._out = state.out
        self._cap = state.cap
        self._renting = state.renting
