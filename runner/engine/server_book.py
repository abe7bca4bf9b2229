"""The core's book of servers for a run or a queue, built from what the backend offers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.backends.base import Backend
from runner.core.model import Job, Provisioning
from runner.core.servers import ServerBook


def book_for(
    backend: Backend,
    jobs: Sequence[Job],
    cap: int,
    now: float,
    budget_usd: float | None = None,
    provisioning: Provisioning = Provisioning.AHEAD,
    durations_s: Mapping[str, float] | None = None,
) -> ServerBook:
    """The book of `jobs` at most `cap` at once on `backend`'s offer: the core decides, within
    the budget, which servers to hold and which job runs on which."""
    offer = backend.book_offer(jobs, cap)
    return ServerBook.from_offer(
        jobs,
        cap,
        offer,
        budget_usd=budget_usd,
        provisioning=provisioning,
        durations_s=durations_s,
        now=now,
    )
