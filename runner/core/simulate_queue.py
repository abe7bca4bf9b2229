"""A queue's day replayed through the core, pure: what warmth would have given and cost.

`simulate_queue` drives an ongoing `PlacingCore` (serve's) as the driver would: jobs arrive at
their submission times, a rented server answers SSH a fixed boot after its create, a job runs
for its recorded seconds. It answers what an operator sets the warmth knobs from: each job's
wait from submission to its start, how many started on a server already up, the orders made,
what the servers cost and how much of that was idle, and (a check the tests lean on) how often
a server went to a job of another trust domain than the job before it on it.

Nothing here reads a clock or does I/O; the same arrivals give the same answer.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    Event,
    HoldStarts,
    SetTimer,
    TimerFired,
)
from runner.core.model import Attempt, Job
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Quote,
    ReleaseServer,
    RentServer,
    ServerLost,
    ServerReady,
    ServerReleased,
    StartOn,
)
from runner.core.scheduler import Entry
from runner.core.servers import ServerBook
from runner.core.simulate_market import ModelMarket
from runner.core.warm_policy import WarmPolicy


@dataclass(frozen=True)
class Arrival:
    """A job submitted at `at` (Unix seconds) whose script ran `run_s` seconds."""

    at: float
    job: Job
    run_s: float


@dataclass
class QueueSimResult:
    waits_s: dict[str, float] = field(default_factory=dict)  # job -> submission to start
    warm_starts: int = 0  # jobs that started on a server already up when they arrived
    orders: int = 0
    cost_usd: float = 0.0  # every server, from its create to its release
    idle_usd: float = 0.0  # of which idle: no job on it
    cross_domain_reuses: int = 0  # a server given to a job of another domain than its last
    dirty_reuses: int = 0  # a job started on a server that failed its clean handover
    double_starts: int = 0  # a job started on a server another job still ran on

    def wait_percentile(self, q: float) -> float:
        waits = sorted(self.waits_s.values())
        if not waits:
            return 0.0
        return waits[min(len(waits) - 1, int(q * len(waits)))]


class _QueueSim:
    def __init__(
        self,
        arrivals: Sequence[Arrival],
        book: ServerBook,
        boot_s: float,
        horizon: float,
        dirty: Callable[[], bool] = lambda: False,
    ) -> None:
        self.book = book
        self.core = PlacingCore((), book, ongoing=True, on_fatal=_hold)
        self.boot_s = boot_s
        self.horizon = horizon
        self.heap: list[tuple[float, int, object]] = []
        self.seq = itertools.count()
        self.run_s: dict[str, float] = {}
        self.arrived: dict[str, float] = {}
        self.result = QueueSimResult()
        self.rented: dict[int, tuple[Quote, float]] = {}  # server -> quote, create time
        self.up: set[int] = set()
        self.domain_on: dict[int, str] = {}  # server -> trust domain of its last job
        self.domain_of: dict[str, str] = {}  # job -> its trust domain
        self.dirty = dirty  # does a server fail the clean handover after this attempt?
        self.failed_handover: set[int] = set()
        self.busy: dict[int, str] = {}  # server -> the job running on it
        for arrival in arrivals:
            self.push(arrival.at, arrival)

    def push(self, at: float, item: object) -> None:
        heapq.heappush(self.heap, (at, next(self.seq), item))

    def run(self) -> QueueSimResult:
        now = 0.0
        while self.heap and self.heap[0][0] <= self.horizon:
            now, _, item = heapq.heappop(self.heap)
            if isinstance(item, Arrival):
                job = item.job
                self.run_s[job.id], self.arrived[job.id] = item.run_s, now
                self.domain_of[job.id] = job.trust
                self.apply(self.core.add([Entry(job, next(self.seq))], {}, now), now)
                continue
            if isinstance(item, AttemptEnded):
                self.busy = {s: j for s, j in self.busy.items() if j != item.job_id}
            if isinstance(item, ServerReady):
                if item.server not in self.rented:
                    continue  # given back while it booted
                self.up.add(item.server)
            self.apply(self.core.handle(cast(CoreEvent, item), now), now)
        self.apply(self.book.finish(self.horizon), self.horizon)
        self.result.idle_usd = sum(f.usd for f in self.book.idle_money().by_day.values())
        return self.result

    def apply(self, commands: list[CoreCommand], now: float) -> None:
        for cmd in commands:
            if isinstance(cmd, RentServer):
                self.result.orders += 1
                self.rented[cmd.server] = (cmd.quote, now)
                self.push(now + self.boot_s, ServerReady(cmd.server))
            elif isinstance(cmd, StartOn):
                self._start(cmd, now)
            elif isinstance(cmd, ReleaseServer):
                self._release(cmd.server, now)
            elif isinstance(cmd, SetTimer):
                self.push(max(now, cmd.at), TimerFired(cmd.token))

    def _start(self, cmd: StartOn, now: float) -> None:
        job_id = cmd.job_id
        if cmd.server in self.failed_handover:
            self.result.dirty_reuses += 1
        if cmd.server in self.busy:
            self.result.double_starts += 1
        self.busy[cmd.server] = job_id
        domain = self.domain_of[job_id]
        last = self.domain_on.get(cmd.server)
        if last is not None and last != domain:
            self.result.cross_domain_reuses += 1
        self.domain_on[cmd.server] = domain
        arrived = self.arrived.get(job_id, now)
        self.result.waits_s[job_id] = now - arrived
        if now - arrived < self.boot_s and cmd.server in self.up:
            self.result.warm_starts += 1
        self.push(now, AttemptPlaced(job_id, cmd.attempt))
        ran = self.run_s.get(job_id, 0.0)
        if self.dirty():  # as the driver reports it: the server lost before the attempt ends
            self.failed_handover.add(cmd.server)
            self.push(now + ran, ServerLost(cmd.server, "failed the clean handover"))
        self.push(now + ran, AttemptEnded(job_id, Attempt(cmd.attempt, now, now + ran, 0)))

    def _release(self, server: int, now: float) -> None:
        held = self.rented.pop(server, None)
        if held is None:
            return
        quote, since = held
        self.result.cost_usd += quote.usd_per_hour * (now - since) / 3600.0
        self.up.discard(server)
        self.push(now, ServerReleased(server))


def simulate_queue(
    arrivals: Sequence[Arrival],
    offers: Sequence[Quote],
    policy: WarmPolicy,
    *,
    cap: int = 4,
    boot_s: float = 30.0,
    horizon_s: float | None = None,
    dirty_chance: float = 0.0,
    seed: int = 0,
) -> QueueSimResult:
    """Replay `arrivals` through serve's core with `policy`; the servers still held at the
    end (the last arrival's end plus a day at most) are given back then."""
    start = min((a.at for a in arrivals), default=0.0)
    last = max((a.at + a.run_s for a in arrivals), default=start)
    horizon = start + horizon_s if horizon_s is not None else last + 2 * boot_s
    boot = BootTimes(default_s=boot_s, allowance_s=max(boot_s * 4, 120.0))
    book = ServerBook((), cap, market=ModelMarket(offers), boot=boot, now=start)
    book.warmth = policy
    rng = random.Random(seed)
    return _QueueSim(arrivals, book, boot_s, horizon, lambda: rng.random() < dirty_chance).run()


def _hold(reason: str, now: float) -> Event:
    return HoldStarts(now + 60.0)  # a fatal rent, which this model never makes
