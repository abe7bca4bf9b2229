"""The parts of a server book, wired as `ServerBook` wires them, for tests of one part's rules.

Each test of a part (test_fleet.py, test_placement.py, ...) drives that part directly and
reads the commands it added to the shared list; the other parts are the real ones, so a
part is tested with the neighbours it has in a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runner.core.ahead import RentAhead
from runner.core.book_part import BookState
from runner.core.budget import Budget
from runner.core.ends import Ends
from runner.core.events import SetTimer
from runner.core.fleet import Fleet, Server
from runner.core.giving_back import GiveBack
from runner.core.hedge import NO_HEDGE, HedgePolicy
from runner.core.hedging import Hedger
from runner.core.known_jobs import KnownJobs
from runner.core.model import GpuAsk, Job
from runner.core.placement import Placement
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    JobNote,
    NoMarket,
    Provisioning,
    Quote,
    ReleaseServer,
    RentServer,
    StartOn,
)
from runner.core.renting import Renter
from runner.core.simulate_market import ModelMarket
from runner.core.warmth import Warmth

BOOT = BootTimes(default_s=100.0, allowance_s=300.0)
OFFERS = (
    Quote("a1", "RTX 3090", 1, 0.30),
    Quote("a2", "RTX 3090", 1, 0.40),
    Quote("b1", "RTX 4090", 1, 0.60),
    Quote("b2", "RTX 4090", 1, 0.70),
)
A3090 = OFFERS[0]
B4090 = OFFERS[2]


def job(job_id: str, *needs: str, gpu: str = "3090", minutes: float | None = 5.0, **kw: Any) -> Job:
    estimate = minutes * 60 if minutes is not None else None
    return Job(
        id=job_id,
        name=job_id,
        run="true",
        needs=needs,
        gpu=GpuAsk(type=gpu),
        estimate_s=estimate,
        timeout_s=kw.pop("timeout_s", 600.0),
        **kw,
    )


def pipeline(*jobs: Job) -> list[Job]:
    return [replace(j, index=i) for i, j in enumerate(jobs)]


@dataclass
class Parts:
    out: list[CoreCommand]
    budget: Budget
    jobs: KnownJobs
    fleet: Fleet
    ends: Ends
    hedger: Hedger
    placer: Placement
    renter: Renter
    ahead: RentAhead
    giver: GiveBack
    freed: list[int] = field(default_factory=list)  # one entry per slot freed

    def said(self) -> list[CoreCommand]:
        """The commands added since the last call."""
        out = self.out[:]
        self.out.clear()
        return out

    def want(self, *job_ids: str, timeout_s: float = 600.0) -> None:
        for job_id in job_ids:
            self.jobs.want(job_id, 1, timeout_s)
            self.ends.ready(job_id)

    def up(self, quote: Quote, now: float = 0.0, for_job: str = "x") -> Server:
        """A rented server, already up and idle: it booted in the expected 100 s."""
        said = len(self.out)
        since = now - BOOT.default_s
        server = self.fleet.rent(for_job, quote, now + 1000.0, 0.0, since, ahead=False)
        self.fleet.unclaim(for_job)
        server.rented_for = None
        self.fleet.ready(server, now)
        del self.out[said:]  # the rent it took is not what a test asks about
        return server


def parts(
    jobs: Sequence[Job],
    cap: int = 3,
    *,
    offers: Sequence[Quote] | None = OFFERS,
    budget_usd: float | None = None,
    hedge: HedgePolicy = NO_HEDGE,
    provisioning: Provisioning = Provisioning.AHEAD,
    boot: BootTimes = BOOT,
) -> Parts:
    """The parts of a book over `jobs` (`offers` None: fixed hosts only, nothing to rent)."""
    renting = offers is not None
    out: list[CoreCommand] = []
    budget = Budget(budget_usd)
    known = KnownJobs(ModelMarket(offers) if offers is not None else NoMarket())
    fleet = Fleet(budget, out, boot)
    state = BookState(fleet, known, budget, out, cap, renting)
    ends = Ends(state, provisioning)
    hedger = Hedger(state, hedge)
    placer = Placement(state, ends, hedger)
    renter = Renter(state, ends, hedger)
    ahead = RentAhead(state, ends, renter)
    warmth = Warmth(state)
    fleet.on_idle_end = warmth.idle_ended
    giver = GiveBack(state, ends, warmth)
    made = Parts(out, budget, known, fleet, ends, hedger, placer, renter, ahead, giver)

    def freed() -> None:  # as the book wires it, and counted
        made.freed.append(1)
        ends.wake_starved()

    fleet.on_free = freed
    for job_id in known.add(list(jobs)):
        ends.needs_known(job_id, 0.0)
    return made


def rents(out: Sequence[CoreCommand]) -> list[RentServer]:
    return [c for c in out if isinstance(c, RentServer)]


def starts(out: Sequence[CoreCommand]) -> list[StartOn]:
    return [c for c in out if isinstance(c, StartOn)]


def releases(out: Sequence[CoreCommand]) -> list[ReleaseServer]:
    return [c for c in out if isinstance(c, ReleaseServer)]


def timers(out: Sequence[CoreCommand]) -> list[SetTimer]:
    return [c for c in out if isinstance(c, SetTimer)]


def notes(out: Sequence[CoreCommand]) -> list[JobNote]:
    return [c for c in out if isinstance(c, JobNote)]
