"""A discrete-event simulator of the core with servers against a market: no threads, no I/O.

`simulate_servers` drives `PlacingCore` (the scheduler with its server book) as the driver
would, against a market model: offers with prices and fees, boot times drawn from a range,
servers lost while they run a job, rents that fail. It measures makespan, cost, busy, idle and
boot time, and checks along the way what the core promises: servers held within the cap, money
committed within the budget, no job waiting beside an idle server it fits. `plan` uses it to
predict a run; the tests use it to check the rules over random pipelines and markets.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from runner.core.events import (
    AttemptEnded,
    AttemptPlaced,
    AttemptTimeout,
    KillAttempt,
    SetTimer,
    TimerFired,
)
from runner.core.hosts import (
    EventKind,
    HostEvent,
    HostMemory,
    expected_usd_per_hour,
    loser_kind,
)
from runner.core.known_jobs import WaitReason
from runner.core.model import Attempt, FailureKind, GpuAsk, Job, JobResult, RunStatus
from runner.core.placing import CoreEvent, PlacingCore
from runner.core.rentals import (
    CoreCommand,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerLost,
    ServerReady,
    ServerReleased,
    StartOn,
)
from runner.core.servers import ServerBook

Duration = Callable[[str, int], float]  # (job id, attempt) -> seconds its script runs

# A run's events, at most: so many per job (a job's attempts, timers, boots and hedges take
# tens) and so many besides. A core that neither ends the run nor stops making events (a
# livelock: a ring of hedges re-renting the same dead hosts) would run a simulation for ever
# and hang `plan` and the tests; past this it is stopped, loudly.
EVENTS_PER_JOB = 2_000
EVENTS_BESIDES = 20_000


class SimulationStuck(RuntimeError):
    """The core made more events than any run can need: it is caught in a loop."""


# A healthy Clore boot, create -> SSH answering: 35 s at best in the one real log, minutes
# with a large image (reference/clore-api.md §8).
HEALTHY_BOOT_S = (35.0, 180.0)
# After "online", how long the adapter probes an sshd that never answers before giving up.
SSH_PROBE_S = 170.0
# A healthy boot comes online this share of the way to SSH (its container then deploys: the
# image pulls); a dead host never does. Lets the core tell a pull from a host not coming up.
ONLINE_SHARE = 0.3


@dataclass(frozen=True)
class MarketModel:
    """A marketplace to simulate against: offers with prices and fees, how long a server takes
    to boot (uniform between the two bounds), how often a server is lost while a job runs on it,
    and how often a rent fails outright.

    Hosts that fail the way real ones do: `dead` hosts never come online (each offer's host is
    dead with chance `dead_fraction`, drawn once per host and seed, or named in `dead_hosts`),
    and `ssh_dead` ones come online with an sshd that never answers. The adapter gives a dead
    boot up after the book's boot bound (`allowance_s`), an unanswering sshd `SSH_PROBE_S`
    after it came online; each such order is billed for the time it lived."""

    offers: tuple[Quote, ...]
    boot_s: tuple[float, float] = (120.0, 300.0)
    lost_per_hour: float = 0.0
    rent_failure_rate: float = 0.0
    dead_fraction: float = 0.0
    dead_hosts: frozenset[str] = frozenset()
    ssh_dead_fraction: float = 0.0
    ssh_dead_hosts: frozenset[str] = frozenset()
    # Which hosts are dead is drawn with this seed (None: the run's): two runs on the same
    # market, a history carried from one to the next, share it and differ in their boots.
    market_seed: int | None = None

    def dead(self, host: str, seed: int) -> bool:
        seed = seed if self.market_seed is None else self.market_seed
        return host in self.dead_hosts or _draw(host, seed, "dead") < self.dead_fraction

    def ssh_dead(self, host: str, seed: int) -> bool:
        seed = seed if self.market_seed is None else self.market_seed
        return host in self.ssh_dead_hosts or _draw(host, seed, "ssh") < self.ssh_dead_fraction


def _draw(host: str, seed: int, what: str) -> float:
    """One number in [0, 1) per host, seed and question: a host is dead all run long."""
    return random.Random(f"{seed}/{what}/{host}").random()


class ModelMarket:
    """The core's view of a `MarketModel`: the cheapest fitting offer not excluded. An ask fits
    an offer whose GPU model contains its type (any case), with enough GPUs, within its cap.
    With the host history (`memory`): hosts it says to skip are left out, the rest rank by
    expected cost, and each quote carries the host's expected boot and failed-boot chance."""

    def __init__(
        self, offers: Sequence[Quote], memory: HostMemory | None = None, bound_s: float = 360.0
    ) -> None:
        self._memory = memory
        if memory is None:
            self._offers = sorted(offers, key=lambda q: (q.usd_per_hour, q.host))
            return
        skipped = memory.skipped()
        known = [_remembered(q, memory) for q in offers if q.host not in skipped]
        self._offers = sorted(known, key=lambda q: (_expected_usd_per_hour(q, bound_s), q.host))

    def best(self, ask: GpuAsk | None, excluded: Set[str]) -> Quote | None:
        return next((q for q in self._offers if q.host not in excluded and self.fits(q, ask)), None)

    def fits(self, quote: Quote, ask: GpuAsk | None) -> bool:
        if ask is None:
            return True
        if ask.type and ask.type.lower() not in quote.gpu_model.lower():
            return False
        cap = ask.max_usd_per_hour
        return quote.gpu_count >= ask.count and (cap is None or quote.usd_per_hour <= cap)

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        return f"no offer fits {ask}"


def _remembered(quote: Quote, memory: HostMemory) -> Quote:
    return replace(
        quote,
        boot_s=memory.expected_boot_s(quote.host),
        fail_chance=memory.fail_chance(quote.host),
    )


def _expected_usd_per_hour(quote: Quote, bound_s: float) -> float:
    chance = quote.fail_chance or 0.0
    return expected_usd_per_hour(
        quote.usd_per_hour, quote.creation_fee_usd, chance, bound_s, quote.creation_fee_after_s
    )


@dataclass
class _Held:
    rented_at: float
    quote: Quote
    ready_at: float | None = None
    busy_since: float | None = None
    busy_s: float = 0.0
    rented: bool = True


@dataclass
class ServersResult:
    """A simulated run on rented servers, and what the checks along the way found."""

    makespan_s: float
    cost_usd: float  # what the book counted
    billed_usd: float  # what the market would bill, from the simulated holds
    results: tuple[JobResult, ...]
    status: RunStatus
    max_servers: int
    rents: int
    busy_s: float = 0.0  # servers running a job
    idle_s: float = 0.0  # servers ready and held, running nothing
    boot_s: float = 0.0  # servers held while booting
    max_committed_usd: float = 0.0
    broken: list[str] = field(default_factory=list)  # invariants seen broken, with when
    first_start_s: float | None = None  # when the first job started on a server
    hedges: int = 0  # rents that hedged a slow boot
    failed_boots: int = 0  # rents whose host never came up or never answered SSH
    creation_fees_usd: float = 0.0  # paid for orders that lived 10 minutes
    host_events: list[HostEvent] = field(default_factory=list)  # what the history would keep
    rented_hosts: list[str] = field(default_factory=list)  # each rent's host, in order
    # Rentals held past their host's maximum rental length (the market would have ended them
    # under the run): the core promises none.
    outlived: int = 0
    events: int = 0  # events the core was handed: a run that loops is stopped by their count


class _ServersSim:
    """Drives a `PlacingCore` against a `MarketModel` on a fake clock."""

    def __init__(
        self,
        core: PlacingCore,
        model: MarketModel,
        duration: Duration,
        seed: int,
        checks: bool,
        start_unix: float = 0.0,
        max_events: int = EVENTS_BESIDES,
    ):
        self.core, self.model, self.duration = core, model, duration
        self.max_events = max_events
        self.checks = checks
        self.rng = random.Random(seed)
        self.queue: list[tuple[float, int, CoreEvent]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.held: dict[int, _Held] = {}
        self.running: dict[str, tuple[int, int, float]] = {}  # job -> attempt, server, start
        self.ends: dict[str, float] = {}  # job -> when its running attempt is to end
        self.result = ServersResult(0.0, 0.0, 0.0, (), RunStatus.PASSED, 0, 0)
        self.seed = seed
        self.start_unix = start_unix
        self.boots: dict[int, float] = {}  # booting servers that will come up: their boot
        self.failing: dict[int, tuple[EventKind, float, float]] = {}  # ... that will not
        self.online: set[int] = set()  # booting servers seen online (deploying)
        # What to do with each kind of command and event, found with one look-up each (a
        # chain of isinstance tests costs more, for every one of them); commands that change
        # nothing in the simulated market (a recorded attempt, a settled job) have no entry.
        self._apply_by_kind: dict[type, Callable[[Any], None]] = {
            StartOn: self._start,
            SetTimer: self._timer,
            RentServer: self._rent,
            ReleaseServer: self._release_cmd,
            KillAttempt: self._kill,
        }
        # Is an event about something already over (it then decides nothing)? Asked of
        # every event; kinds without an entry never are.
        self._stale_by_kind: dict[type, Callable[[Any], bool]] = {
            AttemptEnded: self._stale_end,
            AttemptPlaced: self._stale_placed,
            TimerFired: self._stale_timer,
            ServerReady: self._stale_server,
            ServerDeploying: self._stale_deploying,
            ServerLost: self._stale_server,
            RentFailed: self._stale_server,
        }

    def push(self, at: float, event: CoreEvent) -> None:
        heapq.heappush(self.queue, (at if at > self.now else self.now, next(self.seq), event))

    def run(self) -> ServersResult:
        self.apply(self.core.start(self.now))
        queue, core, apply = self.queue, self.core, self.apply
        stale_by_kind = self._stale_by_kind  # `stale`, inlined: it runs for every event
        left = self.max_events
        while queue and (self.held or not core.done):
            left -= 1
            if left < 0:
                raise SimulationStuck(self._stuck())
            self.now, _, event = heapq.heappop(queue)
            check = stale_by_kind.get(type(event))
            if check is None or not check(event):
                apply(core.handle(event, self.now))
        r = self.result
        r.events = self.max_events - left
        r.makespan_s, r.results = self.now, self.core.results()
        r.status, r.cost_usd = self.core.status(), self.core.book.cost_usd(self.now)
        return r

    def _stuck(self) -> str:
        r, held = self.result, sorted({h.quote.host for h in self.held.values()})
        return (
            f"the simulation made {self.max_events} events and the run has not ended "
            f"(at {self.now:.0f} s: {r.rents} rents, {len(held)} held on {', '.join(held)})"
        )

    def _stale_end(self, event: AttemptEnded) -> bool:
        current = self.running.get(event.job_id)
        if current is None or current[0] != event.attempt.number:
            return True
        self._free(event.job_id)
        return False

    def _stale_placed(self, event: AttemptPlaced) -> bool:
        current = self.running.get(event.job_id)
        return current is None or current[0] != event.attempt

    def _stale_timer(self, event: TimerFired) -> bool:
        # The timeout of an attempt that already ended does nothing: most timers are these,
        # and skipping them here keeps a 10,000-job simulation to the events that decide
        # something.
        token = event.token
        if isinstance(token, AttemptTimeout):
            current = self.running.get(token.job_id)
            return current is None or current[0] != token.number
        return False

    def _stale_server(self, event: ServerReady | ServerLost | RentFailed) -> bool:
        held = self.held.get(event.server)
        if held is None:
            return True  # given back before it came up
        if isinstance(event, ServerReady):
            held.ready_at = self.now
            boot = self.boots.pop(event.server, None)
            self._remember(held.quote.host, "up", boot)
        elif isinstance(event, RentFailed) and event.server in self.failing:
            kind, cost, _ = self.failing.pop(event.server)
            del self.held[event.server]  # the adapter cancelled it: billed in the event
            r = self.result
            r.failed_boots += 1
            r.billed_usd += cost
            if self.now - held.rented_at >= held.quote.creation_fee_after_s:
                r.creation_fees_usd += held.quote.creation_fee_usd
            r.boot_s += self.now - held.rented_at
            self._remember(held.quote.host, kind, None)
        return False

    def _stale_deploying(self, event: ServerDeploying) -> bool:
        if event.server not in self.held:
            return True  # given back before it came online
        self.online.add(event.server)
        return False

    def _remember(self, host: str, kind: EventKind, boot_s: float | None) -> None:
        self.result.host_events.append(HostEvent(host, kind, self.start_unix + self.now, boot_s))

    def apply(self, commands: list[CoreCommand]) -> None:
        if not commands:  # nothing done, nothing changed: the checks would find what they found
            return
        by_kind = self._apply_by_kind
        for cmd in commands:
            carry_out = by_kind.get(type(cmd))  # most commands change nothing here: no entry
            if carry_out is not None:
                carry_out(cmd)
        if self.checks:
            self._check()

    def _timer(self, cmd: SetTimer) -> None:
        if not self._past_its_end(cmd):
            self.push(cmd.at, TimerFired(cmd.token))

    def _kill(self, cmd: KillAttempt) -> None:
        if cmd.job_id in self.running:
            number, _, began = self.running[cmd.job_id]
            self.push(self.now, _finish(cmd.job_id, number, began, self.now, cmd.reason))

    def _release_cmd(self, cmd: ReleaseServer) -> None:
        held = self.held.get(cmd.server)
        if held is not None and held.ready_at is None and cmd.reason.startswith("hedge:"):
            # A hedge's loser, given back still booting: the history keeps it as slow (not
            # online yet) or a pull, as the adapter's would.
            online = cmd.server in self.online
            kind = loser_kind(self.now - held.rented_at, online)
            if kind is not None:
                self._remember(held.quote.host, kind, self.now - held.rented_at)
            self.boots.pop(cmd.server, None)
            self.failing.pop(cmd.server, None)
        self.online.discard(cmd.server)
        self._release(cmd.server)
        if cmd.rented:  # the market confirms a cancel at once: the host may be rented again
            self.push(self.now, ServerReleased(cmd.server))

    def _past_its_end(self, timer: SetTimer) -> bool:
        """An attempt's timeout due no sooner than the attempt's end, already scheduled: the
        attempt is over when it would fire (a kill only ends it sooner), so it would find
        nothing to do. Not queued: these are a third of a large simulation's events."""
        token = timer.token
        if not isinstance(token, AttemptTimeout):
            return False
        current = self.running.get(token.job_id)
        ends_at = self.ends[token.job_id]
        return current is not None and current[0] == token.number and ends_at <= timer.at

    def _rent(self, cmd: RentServer) -> None:
        self.result.rents += 1
        self.result.rented_hosts.append(cmd.quote.host)
        self.result.hedges += cmd.hedge_of is not None
        self.held[cmd.server] = _Held(self.now, cmd.quote)
        low, high = self.model.boot_s
        boot = self.rng.uniform(low, high)
        host, model, seed = cmd.quote.host, self.model, self.seed
        if model.dead(host, seed):
            self._fails(cmd, self.core.book.boot.allowance_s, "never_up")
        elif model.ssh_dead(host, seed):
            self.push(self.now + boot * ONLINE_SHARE, ServerDeploying(cmd.server))  # online
            self._fails(cmd, min(boot, self.core.book.boot.allowance_s) + SSH_PROBE_S, "ssh_failed")
        elif self.rng.random() < self.model.rent_failure_rate:
            self.push(self.now + boot / 2, RentFailed(cmd.server, "the host did not start"))
        else:
            self.push(self.now + boot * ONLINE_SHARE, ServerDeploying(cmd.server))
            self.push(self.now + boot, ServerReady(cmd.server))
            self.boots[cmd.server] = boot

    def _fails(self, cmd: RentServer, after_s: float, kind: EventKind) -> None:
        """The adapter gives the boot up after `after_s`: the order lived that long."""
        q = cmd.quote
        cost = q.cost_usd(after_s)
        words = "never came online" if kind == "never_up" else "sshd never answered"
        self.push(self.now + after_s, RentFailed(cmd.server, f"#{q.host} {words}", cost))
        self.failing[cmd.server] = (kind, cost, after_s)

    def _start(self, cmd: StartOn) -> None:
        held = self.held.get(cmd.server)
        if held is None:  # a fixed host: there from the start, never billed
            held = self.held[cmd.server] = _Held(0.0, Quote("fixed"), ready_at=0.0, rented=False)
        now, job_id, number = self.now, cmd.job_id, cmd.attempt
        held.busy_since = now
        if self.result.first_start_s is None:
            self.result.first_start_s = now
        seconds = self.duration(job_id, number)
        self.running[job_id] = (number, cmd.server, now)
        queue, seq = self.queue, self.seq  # `push`, inlined: twice for every job
        heapq.heappush(queue, (now, next(seq), AttemptPlaced(job_id, number)))
        rate = self.model.lost_per_hour
        if rate > 0 and (lost_after := self.rng.expovariate(rate / 3600)) < seconds:
            end = now + lost_after
            self.ends[job_id] = end
            self.push(end, ServerLost(cmd.server, "outbid"))
            self.push(end, _finish(job_id, number, now, end, FailureKind.SERVER_LOST))
        else:
            end = now + seconds
            self.ends[job_id] = end
            ended = _finish(job_id, number, now, end, None)
            heapq.heappush(queue, (end if end > now else now, next(seq), ended))

    def _free(self, job_id: str) -> None:
        _, server, _ = self.running.pop(job_id)
        held = self.held.get(server)
        if held is not None and held.busy_since is not None:
            held.busy_s += self.now - held.busy_since
            held.busy_since = None

    def _release(self, server: int) -> None:
        held = self.held.pop(server, None)
        if held is None or not held.rented:
            return
        if held.busy_since is not None:  # given back under a job (lost): that job ends
            held.busy_s += self.now - held.busy_since
        r, q = self.result, held.quote
        ready = held.ready_at if held.ready_at is not None else self.now
        r.boot_s += ready - held.rented_at
        r.busy_s += held.busy_s
        r.idle_s += max(0.0, self.now - ready - held.busy_s)
        lived_s = self.now - held.rented_at
        r.billed_usd += q.cost_usd(lived_s)
        if q.max_rental_s is not None and lived_s > q.max_rental_s + 1e-6:
            r.outlived += 1
            r.broken.append(
                f"{self.now:.1f}: #{q.host} held {lived_s:.0f} s, its maximum "
                f"rental length is {q.max_rental_s:.0f} s"
            )
        if lived_s >= q.creation_fee_after_s:
            r.creation_fees_usd += q.creation_fee_usd

    def _check(self) -> None:
        """The rules the core promises, checked after every step. Fixed hosts may outnumber
        the cap (it bounds the jobs running on them, not the hosts)."""
        book, r, now = self.core.book, self.result, self.now
        held = book.held
        if held > r.max_servers:
            r.max_servers = held
        if held > book.cap and book.renting:
            r.broken.append(f"{now:.1f}: {held} servers held, cap {book.cap}")
        committed = book.committed_usd(now)
        if committed > r.max_committed_usd:
            r.max_committed_usd = committed
        if book.budget_usd is not None and committed > book.budget_usd + 1e-6:
            r.broken.append(f"{now:.1f}: committed ${committed:.4f} > ${book.budget_usd}")
        if not (book.waiting_count and book.idle_count) or book.running_count >= book.cap:
            return
        idle = book.idle_servers()
        for job_id in book.waiting():
            short_of_money = (
                book.budget_usd is not None and book.wait_reason(job_id) is WaitReason.BUDGET
            )
            # A server rented for another job is that job's: taking it makes that one rent again.
            free = (v for v in idle if v.rented_for in (None, job_id))
            if not short_of_money and any(book.holds(v, job_id, now) for v in free):
                r.broken.append(f"{now:.1f}: {job_id} waits beside an idle server")


def simulate_servers(
    jobs: Sequence[Job],
    book: ServerBook,
    model: MarketModel,
    duration: Duration,
    *,
    seed: int = 0,
    run_timeout_s: float | None = None,
    checks: bool = True,
    start_unix: float = 0.0,
    max_events: int | None = None,
) -> ServersResult:
    """Run the core with servers to completion against a simulated market. `checks`: check
    the core's promises after every step (a benchmark of the core alone turns them off).
    `start_unix`: the run's start on the history's clock (its host events are stamped so).
    `max_events`: past so many events the run raises `SimulationStuck` (None: a generous
    bound for these jobs)."""
    core = PlacingCore(jobs, book, run_timeout_s)
    limit = max_events if max_events is not None else EVENTS_BESIDES + EVENTS_PER_JOB * len(jobs)
    return _ServersSim(core, model, duration, seed, checks, start_unix, limit).run()


def _finish(
    job_id: str, number: int, began: float, end: float, failure: FailureKind | None
) -> AttemptEnded:
    code = 0 if failure is None else (1 if failure is FailureKind.TEST_FAILURE else None)
    return AttemptEnded(job_id, Attempt(number, began, end, code, failure))
