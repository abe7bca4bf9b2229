"""Warm servers, pure: which idle servers a queue keeps for the next job, which it rents for
warmth, and what their idle time costs (runner/core/warm_policy.py says what it is told).

- An idle rented server that the book's own rules would give back (no job wants it within a
  boot) is kept, when `keep_warm_s` says so, until that long after its last job ended; or,
  while a pool's window is on and the pool has fewer idle servers than it asks, until the
  window ends (looked at again at least hourly). A job that fits it takes it before anything
  is rented: placing comes first in each decision.
- A pool short of idle servers in its window rents one for warmth, when a slot under the cap
  is free and no ready job waits for one, and the budget holds its first hour.
- The idle budget: a keep reserves its idle money up to its end first, beside what idle
  servers cost today already and what the other keeps reserved; one that does not fit whole
  is kept as long as the budget holds, then goes back; a rental for warmth must fit whole.
- A server that ran a job of an untrusted domain (a fork's pull request) is never kept.

Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from dataclasses import replace

from runner.core.book_part import BookPart, BookState
from runner.core.events import BookTimer, BookWake, SetTimer
from runner.core.fleet import BOOTING, EPS_S, IDLE, Server
from runner.core.idle_money import IdleFigure, IdleMoney
from runner.core.known_jobs import WaitReason
from runner.core.model import GpuAsk, Job
from runner.core.rental_length import best_that_holds, ends_at
from runner.core.warm_policy import COLD, DAY_S, WarmPolicy, WarmPool, untrusted

LOOK_AGAIN_S = 3600.0  # a pool's keep is looked at again at least this often


class Warmth(BookPart):
    """Keeps servers warm and rents for warmth, within the idle budget; counts idle money."""

    def __init__(self, state: BookState) -> None:
        super().__init__(state)
        self._policy: WarmPolicy = COLD
        self._money = IdleMoney()
        self._kept: dict[int, float] = {}  # server -> until when it is kept for warmth
        self._for_pool: dict[int, WarmPool] = {}  # rented for warmth, no job ran on it yet
        self._timers: set[int] = set()  # times the book asked to be woken at for warmth

    @property
    def policy(self) -> WarmPolicy:
        """What a queue keeps warm (serve's --keep-warm, --warm, --idle-budget)."""
        return self._policy

    @policy.setter
    def policy(self, policy: WarmPolicy) -> None:
        self._policy = policy

    @property
    def money(self) -> IdleMoney:
        """Idle time of rented servers, USD and seconds, by UTC day and GPU type, of the
        stretches over."""
        return self._money

    # -- idle money ----------------------------------------------------------------------

    def idle_ended(self, server: Server, now: float) -> None:
        """The rented server runs a job now, or goes back: its idle stretch is counted."""
        since = self._idle_since(server)
        if since is not None and now > since:
            quote = server.quote
            self._money.add(quote.gpu_model, quote.usd_per_hour, since, now)
        self._kept.pop(server.id, None)
        self._for_pool.pop(server.id, None)

    def _idle_since(self, server: Server) -> float | None:
        if server.id in self._for_pool:
            return server.since  # rented for warmth: idle money from its create
        return server.idle_since if server.state is IDLE else None

    def idle_figures(self, now: float) -> dict[tuple[int, str], IdleFigure]:
        """Idle money by (UTC day, GPU model): the stretches over, and those going on."""
        going = IdleMoney()
        going.by_day = {key: replace(f) for key, f in self._money.by_day.items()}
        for server in self._fleet.rented.values():
            since = self._idle_since(server)
            if since is not None and server.job is None and now > since:
                going.add(server.quote.gpu_model, server.quote.usd_per_hour, since, now)
        return going.by_day

    def idle_today_usd(self, now: float) -> float:
        """What idle servers cost today so far: the stretches over, and those going on."""
        day_start = int(now // DAY_S) * DAY_S
        total = self._money.on_day(int(now // DAY_S))
        for server in self._fleet.rented.values():
            since = self._idle_since(server)
            if since is not None and server.job is None:
                total += server.quote.usd_per_hour * max(0.0, now - max(since, day_start)) / 3600
        return total

    # -- keeping -------------------------------------------------------------------------

    def keep_until(self, server: Server, now: float) -> float | None:
        """Until when to keep a rented server nobody is meant for, for warmth (None: not)."""
        if not self._policy.active:
            return None
        trust = server.quote.trust
        if trust is not None and untrusted(trust):
            return None
        if server.state is BOOTING:
            return self._kept.get(server.id) if server.id in self._for_pool else None
        want = -math.inf
        if self._policy.keep_warm_s > 0 and server.last_job is not None:
            want = server.idle_since + self._policy.keep_warm_s
        pool = self._pool_short(server, now)
        if pool is not None:
            closes = pool.window.next_change(now) if pool.window is not None else math.inf
            want = max(want, min(closes, now + LOOK_AGAIN_S))
        end = ends_at(server)  # the market ends the order there: no job could use it after
        until = self._affordable(server, want if end is None else min(want, end), now)
        if until <= now + EPS_S or not self._budget.extend(server.id, until, now):
            self._kept.pop(server.id, None)
            return None
        self._kept[server.id] = until
        return until

    def _pool_short(self, server: Server, now: float) -> WarmPool | None:
        """The pool, on now, that the server is of and that is short without it."""
        model = server.quote.gpu_model
        for pool in self._policy.pools:
            if pool.on(now) and pool.matches(model) and self._held_for(pool, server) < pool.count:
                return pool
        return None

    def _held_for(self, pool: WarmPool, besides: Server | None = None) -> int:
        """Idle servers kept warm of the pool's GPU, and those booting for it."""
        fleet = self._fleet
        held = 0
        for server_id in self._kept.keys() | self._for_pool.keys():
            server = fleet.servers.get(server_id)
            if server is None or server is besides or server.job is not None:
                continue
            if server.claim is None and pool.matches(server.quote.gpu_model):
                held += 1
        return held

    def _affordable(self, server: Server, want: float, now: float) -> float:
        """`want`, or sooner: as long as the idle budget holds the server idle."""
        limit = self._policy.idle_budget_usd
        price = server.quote.usd_per_hour
        if limit is None or price <= 0 or want <= now:
            return want
        left = limit - self.idle_today_usd(now) - self._reserved_usd(now, besides=server.id)
        if left <= 0:
            return now
        return min(want, now + left / price * 3600.0)

    def _reserved_usd(self, now: float, besides: int = -1) -> float:
        """What the other keeps may still cost, to their ends."""
        fleet, total = self._fleet, 0.0
        for server_id, until in self._kept.items():
            server = fleet.servers.get(server_id)
            if server is not None and server_id != besides and server.job is None:
                total += server.quote.usd_per_hour * max(0.0, until - now) / 3600.0
        return total

    # -- renting for warmth ----------------------------------------------------------------

    def top_up(self, now: float) -> None:
        """Rent for each pool on now that holds fewer idle servers than it asks."""
        if not self._policy.pools or not self._renting:
            return
        servers = self._fleet.servers
        if any(i not in servers for i in self._for_pool):  # a rent for warmth that failed
            self._for_pool = {i: p for i, p in self._for_pool.items() if i in servers}
            self._kept = {i: u for i, u in self._kept.items() if i in servers}
        for pool in self._policy.pools:
            if pool.window is not None:
                self._wake_at(pool.window.next_change(now))
            if pool.on(now):
                for _ in range(pool.count - self._held_for(pool)):
                    if not self._rent_for(pool, now):
                        break

    def _rent_for(self, pool: WarmPool, now: float) -> bool:
        fleet, jobs = self._fleet, self._jobs
        if len(fleet.servers) >= self._cap or WaitReason.CAP in jobs.why.values():
            return False  # a ready job's slot is never taken for warmth
        end = pool.window.next_change(now) if pool.window is not None else math.inf
        until = min(end, now + LOOK_AGAIN_S) + fleet.boot.allowance_for("")  # the default image
        ask = GpuAsk(type=pool.gpu)
        quote, _ = best_that_holds(jobs.market, ask, fleet.not_to_rent(), until - now)
        if quote is None:
            return False
        cost = quote.cost_usd(until - now)
        idle_left = math.inf
        if self._policy.idle_budget_usd is not None:
            idle_left = self._policy.idle_budget_usd - self.idle_today_usd(now)
            idle_left -= self._reserved_usd(now)
        if cost > idle_left or self._budget.over(cost, now) > 0:
            self._wake_at((int(now // DAY_S) + 1) * DAY_S)  # a new day, a new budget
            return False
        server = fleet.rent_warm(quote, until, cost, now, warm_job(pool))
        server.quote = replace(quote, image="")  # the default image: a job naming one rents
        self._for_pool[server.id] = pool
        self._kept[server.id] = until
        return True

    def _wake_at(self, at: float) -> None:
        if at < math.inf and int(at) not in self._timers:
            self._timers.add(int(at))
            self._out.append(SetTimer(float(int(at)), BookTimer(BookWake.WARM, int(at))))

    def woken(self, at: int) -> None:
        self._timers.discard(at)


def warm_job(pool: WarmPool) -> Job:
    """What a server rented for warmth boots as: the default image, the pool's GPU."""
    name = f"warm {pool.gpu}"
    return Job(id=f"warm:{pool.gpu}", name=name, run="", gpu=GpuAsk(type=pool.gpu))
