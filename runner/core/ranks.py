"""The rank raise both queues of ready jobs share: the scheduler's and the server book's.

A job's key is (user priority, minus its remaining critical path, file order); jobs added
later (serve adds them over time) lengthen the remaining paths of the older jobs they need.
Each raise goes up through the needs as a work list, never recursion; the newest raise first,
so that an older one's walk stops at once where the ranks already are at least what it would
make them. The ranks come out the same in any order: each is the largest of its duration plus
a dependent's rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from runner.core.model import Job

Key = tuple[int, float, int]


class Ranked(Protocol):
    """A job as a queue holds it: the job and its key, which the raise rewrites."""

    job: Job
    key: Key


def raise_ranks(
    raises: list[tuple[str, float]],
    held: Callable[[str], Ranked | None],
    needs: Callable[[Ranked], Iterable[str]],
    raised: Callable[[str, Ranked], None],
) -> None:
    """Make every (job, rank of a new dependent) raise in `raises` (emptied), and up through
    `needs`. `held` is the queue's record of a job (None: none, or it orders nothing any
    more); `raised` is told each record whose key went up (to queue it again under it)."""
    stack = raises
    while stack:
        job_id, below = stack.pop()
        record = held(job_id)
        if record is None:
            continue
        rank_here = record.job.duration_hint_s + below
        key = record.key
        if rank_here <= -key[1]:
            continue
        record.key = (key[0], -rank_here, key[2])
        raised(job_id, record)
        stack.extend((need, rank_here) for need in needs(record))
