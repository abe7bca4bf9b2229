"""The servers a run holds and the life of each, pure.

Each server is a small state machine, changed only here:

    rented (BOOTING) --ready--> IDLE <--start / attempt ended--> BUSY
    any --given back--> RELEASING --ServerReleased--> GONE      (a rented one)
    BOOTING --rent failed--> GONE;  lost: given back, its host excluded

A fixed host (an SSH host, a local slot) is IDLE from the start and GONE when given back at the
end: nothing to confirm. A given-back server's host is not rented again until its release is
confirmed: a create sent sooner finds the server still rented (Clore's server-already-rented),
and the host would be blamed for our own order.

The fleet also keeps who each server is for: a job's claim (the server rented for it, or the
one it is expected on), the jobs planned to follow it there (`after`), a server kept for one
job's retry, and the pairs of a hedged boot. The money of each rental is reserved, extended and
settled in `Budget` as its state changes. Which server to rent, place or give back is decided
elsewhere (renting.py, placement.py, giving_back.py); nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from runner.core.budget import Budget
from runner.core.model import Job
from runner.core.races import Races
from runner.core.rentals import (
    BootTimes,
    CoreCommand,
    Quote,
    ReleaseServer,
    RentFailed,
    RentServer,
)

# After a script's timeout the job is killed and its artifacts fetched: the budget holds a
# server this much longer than the timeout.
AFTER_SCRIPT_S = 120.0
EPS_S = 1e-6


class State(enum.Enum):
    BOOTING = "booting"  # rented, not up yet
    IDLE = "idle"  # up, running nothing
    BUSY = "busy"  # up, running a job
    RELEASING = "releasing"  # given back, the release not confirmed yet
    GONE = "gone"  # released, its rent failed, or a fixed host given back at the end


BOOTING, IDLE, BUSY, RELEASING, GONE = State  # read on every decision: no attribute lookups


@dataclass(slots=True)  # slots: its fields are read on every decision
class Server:
    """A server the book knows: rented or a fixed host, booting or up, busy or idle."""

    id: int
    quote: Quote
    rented: bool
    since: float  # when the create was sent (a fixed host: when the run began)
    state: State = BOOTING
    job: str | None = None  # the job running on it
    claim: str | None = None  # the job it is meant for next (rented for it, or expected)
    # The jobs expected to follow `claim` on it, in order: a chain planned onto one server
    # rents nothing ahead for its later links.
    after: list[str] = field(default_factory=list)
    # Won back for this job's retry (a spot order outbid, its bid raised): no other job takes
    # it, and no other decision gives it back, until that retry runs or the job is final.
    kept_for: str | None = None
    # The job it was rented for, until a job runs on it: that job's, which no other takes
    # unless the two swap (`Placement._may_take`).
    rented_for: str | None = None
    last_job: str | None = None
    idle_since: float = 0.0  # when its last job ended (or it came up)
    # When it was seen online, its container deploying (None: not yet): the host is alive.
    online_at: float | None = None
    hedge_of: int | None = None  # rented as a hedge of this boot (a late one)


@dataclass(frozen=True)
class ServerView:
    """A server as the book holds it, for simulators, plans and tests."""

    id: int
    quote: Quote
    rented: bool
    booting: bool
    job: str | None
    claim: str | None
    # The job it was rented for, until a job ran on it: no other job may take it from that one.
    rented_for: str | None = None
    # When the market ends its order at the latest (its maximum rental length; None: never).
    ends_at: float | None = None


class Exclusions:
    """Hosts not to rent again: each lost a server or failed a rent under us. A queue server
    forgives a host after a while (`forgive_after_s`; None: never, in a run): a host that
    failed once (rented away, a slow sshd) may be fine an hour later."""

    def __init__(self) -> None:
        self.hosts: set[str] = set()
        self.forgive_after_s: float | None = None
        self._at: dict[str, float] = {}  # in the order they were excluded

    def exclude(self, host: str, now: float) -> None:
        self.hosts.add(host)
        if self.forgive_after_s is not None:
            self._at.pop(host, None)
            self._at[host] = now

    def forgive(self, now: float) -> None:
        """Hosts excluded long enough ago may be rented again (oldest first)."""
        if not self._at:
            return
        assert self.forgive_after_s is not None
        while self._at:
            host, at = next(iter(self._at.items()))
            if at + self.forgive_after_s > now:
                return
            del self._at[host]
            self.hosts.discard(host)


class Fleet:
    """The servers held, indexed for the decisions made after every event, and every change
    of a server's state. `out` is the book's list of commands; `on_free` is told each time a
    server is given back (a slot under the cap opens). Its indexes are its own: the other
    parts read them typed read-only and change them only through its methods."""

    def __init__(self, budget: Budget, out: list[CoreCommand], boot: BootTimes) -> None:
        self.budget = budget
        self._boot = boot  # learned from each boot seen
        # What the other parts read, typed read-only (only the fleet changes them; read on
        # every decision: plain attributes, no property calls), and the fleet's own dicts.
        self._servers: dict[int, Server] = {}
        self.servers: Mapping[int, Server] = self._servers
        # Ready servers running nothing, kept beside `servers` so that each decision looks at
        # these few, not at every server held.
        self._idle: dict[int, Server] = {}
        self.idle: Mapping[int, Server] = self._idle
        self._rented: dict[int, Server] = {}
        self.rented: Mapping[int, Server] = self._rented
        self._fixed_busy = 0  # servers that already exist, running a job
        self._on: dict[str, int] = {}  # job -> server it runs on
        self.on: Mapping[str, int] = self._on
        self._claims: dict[str, int] = {}  # job -> server meant for it
        self.claims: Mapping[str, int] = self._claims
        self._releasing: dict[int, Server] = {}  # given back, the release not confirmed
        self.releasing: Mapping[int, Server] = self._releasing
        self.look: set[int] = set()  # servers whose keep-or-give-back is to be decided
        self.races = Races()  # hedged boots (runner/core/hedge.py)
        self.excluded = Exclusions()  # hosts not to rent again
        self._out = out
        self.on_free: Callable[[], None] = _nothing
        # Told when a rented server running nothing gets a job or goes back: its idle time is
        # money of its own (runner/core/idle_money.py).
        self.on_idle_end: Callable[[Server, float], None] = _no_idle
        self._ids = itertools.count(1)

    # -- what the other parts read -----------------------------------------------------------

    @property
    def boot(self) -> BootTimes:
        """The boot times planned with: the book's at first, then learned from each boot."""
        return self._boot

    @boot.setter
    def boot(self, boot: BootTimes) -> None:
        self._boot = boot

    @property
    def fixed_busy(self) -> int:
        return self._fixed_busy

    @property
    def pairs(self) -> Mapping[int, int]:
        """Each boot racing for a job, and the next in its ring (races.py)."""
        return self.races.pairs

    @property
    def to_hedge(self) -> list[int]:
        """The boots to look at for a hedge now (races.py)."""
        return self.races.to_hedge

    # -- what is to be looked at -------------------------------------------------------------

    def look_at(self, server_id: int) -> None:
        """Decide the server's keep-or-give-back in the next decision."""
        self.look.add(server_id)

    def look_at_all(self) -> None:
        self.look.update(self._servers)

    def take_look(self) -> set[int]:
        """The servers to look at now; none after this."""
        look = self.look
        if look:
            self.look = set()
        return look

    # -- coming in ---------------------------------------------------------------------------

    def add_fixed(self, quote: Quote, now: float) -> Server:
        """A server that already exists: up from the start, never rented."""
        server = Server(next(self._ids), quote, False, now, IDLE)
        self._servers[server.id] = self._idle[server.id] = server
        return server

    def rent(
        self, job_id: str, quote: Quote, until: float, cost_usd: float, now: float, ahead: bool
    ) -> Server:
        """Rent a server for `job_id`, its money reserved until `until` first."""
        server = Server(next(self._ids), quote, True, now)
        server.rented_for = job_id
        self.budget.reserve(server.id, quote, now, until)
        self._servers[server.id] = self._rented[server.id] = server
        self.claim(job_id, server)
        self._out.append(RentServer(server.id, quote, job_id, cost_usd, ahead))
        return server

    def rent_warm(
        self, quote: Quote, until: float, cost_usd: float, now: float, warm: Job
    ) -> Server:
        """Rent a server for warmth, its money reserved until `until` first: it is meant for
        no job, and the next one that fits it takes it. `warm` stands in for the job it
        boots for (the default image, its GPU)."""
        server = Server(next(self._ids), quote, True, now)
        self.budget.reserve(server.id, quote, now, until)
        self._servers[server.id] = self._rented[server.id] = server
        self._out.append(RentServer(server.id, quote, warm.id, cost_usd, warm=warm))
        return server

    def rent_hedge(
        self, boot: Server, job_id: str, quote: Quote, until: float, cost_usd: float, now: float
    ) -> Server:
        """Rent a second server beside the slow `boot`, meant for the same job; the job's
        claim stays on `boot` (`unpair` moves it if that one goes first)."""
        hedge = Server(next(self._ids), quote, True, now)
        hedge.hedge_of = boot.id
        self.budget.reserve(hedge.id, quote, now, until)
        hedge.claim = job_id
        self._servers[hedge.id] = self._rented[hedge.id] = hedge
        self.races.join(boot.id, hedge.id)
        self._out.append(RentServer(hedge.id, quote, job_id, cost_usd, hedge_of=boot.id))
        return hedge

    def ready(self, server: Server, now: float) -> None:
        """The server answers SSH: it is up, and its boot time is learned."""
        server.idle_since = now
        if server.job is None:
            server.state = IDLE
            self._idle[server.id] = server
        else:
            server.state = BUSY
        self._boot = self._boot.with_sample(now - server.since)
        self.look.add(server.id)

    # -- running jobs ------------------------------------------------------------------------

    def start(self, job_id: str, server: Server, now: float | None = None) -> None:
        """The job runs on the (idle) server; its claims were settled by the caller. With
        `now`, its idle time up to now is counted."""
        if server.rented and now is not None:
            self.on_idle_end(server, now)
        server.rented_for = None
        server.job = job_id
        server.state = BUSY
        if not server.rented:
            self._fixed_busy += 1
        self._idle.pop(server.id, None)
        self._on[job_id] = server.id
        if self.look:
            self.look.discard(server.id)

    def job_ended(self, job_id: str, now: float) -> Server | None:
        """The job's attempt ended: the server it ran on (None: it ran on none) is idle."""
        server = self._servers.get(self._on.pop(job_id, -1))
        if server is None:
            return None
        server.job, server.last_job, server.idle_since = None, job_id, now
        if not server.rented:
            self._fixed_busy -= 1
        if server.state is BUSY:
            server.state = IDLE
            self._idle[server.id] = server
        self.look.add(server.id)
        return server

    # -- going -------------------------------------------------------------------------------

    def release(self, server: Server, now: float, reason: str) -> None:
        """Give the server back: a rented one is releasing until `released` says so."""
        if server.rented and server.job is None:
            self.on_idle_end(server, now)
        self.unpair(server)
        self._forget(server)
        for job_id in (server.claim, *server.after):
            if job_id is not None:
                self._claims.pop(job_id, None)
        if server.rented:
            self.budget.given_back(server.id, now)
            server.state = RELEASING
            self._releasing[server.id] = server
        self.on_free()
        self._out.append(ReleaseServer(server.id, reason, server.rented))

    def released(self, server_id: int, cost_usd: float | None) -> None:
        """The release is confirmed: its host may be rented again, its cost is final."""
        server = self._releasing.pop(server_id, None)
        if server is not None:
            server.state = GONE
        self.budget.settle(server_id, cost_usd)

    def lost(self, server: Server, now: float, reason: str) -> None:
        self.excluded.exclude(server.quote.host, now)
        self.release(server, now, f"lost: {reason}")

    def rent_failed(self, server: Server, event: RentFailed, now: float) -> None:
        """The rent failed: the server never was. Its host is excluded when the failure was
        the host's own (not a job no host can run, a fatal refusal, or a price moved)."""
        self.unpair(server)
        self._forget(server)
        if not (event.job_cannot_run or event.fatal or event.requote):
            self.excluded.exclude(server.quote.host, now)
        self.budget.rent_failed(server.id, event.cost_usd)
        for meant in (server.claim, *server.after):
            if meant is not None:
                self._claims.pop(meant, None)

    def _forget(self, server: Server) -> None:
        if not server.rented and server.job is not None:
            self._fixed_busy -= 1
        server.state = GONE
        del self._servers[server.id]
        self._idle.pop(server.id, None)
        self._rented.pop(server.id, None)

    # -- who a server is for -----------------------------------------------------------------

    def claim(self, job_id: str, server: Server) -> None:
        self.unclaim(job_id)
        server.claim = job_id
        self._claims[job_id] = server.id

    def plan_after(self, job_id: str, server: Server) -> None:
        """The job is expected on `server` after the jobs already meant for it."""
        server.after.append(job_id)
        self._claims[job_id] = server.id

    def unclaim(self, job_id: str) -> None:
        server = self._servers.get(self._claims.pop(job_id, -1))
        if server is None:
            return
        if server.kept_for == job_id:
            server.kept_for = None
        if server.claim == job_id:
            server.claim = server.after.pop(0) if server.after else None
            self.look.add(server.id)
        elif job_id in server.after:
            server.after.remove(job_id)

    def swap(self, job_id: str, claimant: str, server: Server) -> None:
        """`job_id` takes `server`, rented for `claimant`, which takes the server booting
        for `job_id` in its place (the caller checked that one fits it)."""
        own = self._servers[self._claims.pop(job_id)]
        # Each job's followers go where it runs: their planned starts stay as they were.
        own.after, server.after = server.after, own.after
        own.claim = own.rented_for = claimant
        for moved in (claimant, *own.after):
            self._claims[moved] = own.id
        for moved in server.after:
            self._claims[moved] = server.id
        server.claim = server.after.pop(0) if server.after else None

    def keep_for(self, job_id: str, server: Server) -> None:
        """Hold `server` for the job's retry: jobs expected on it go elsewhere."""
        for other in (*server.after, server.claim):
            if other is not None and other != job_id:
                self.unclaim(other)
        self.claim(job_id, server)
        server.kept_for = job_id

    def unpair(self, server: Server) -> None:
        """`server` leaves the boots racing for its job (given back, failed): the job it was
        meant for is the others' from now on, so its going takes nothing from the job."""
        ring = self.races.leave(server.id)
        job_id = server.claim
        heir = next((self._servers[i] for i in ring if i in self._servers), None)
        if heir is not None and job_id is not None and heir.claim == job_id:
            self._claims[job_id] = heir.id
            server.claim = None
            self.races.hedge_soon(ring)  # fewer racing now: each hedged at once if it runs late

    # -- reading -----------------------------------------------------------------------------

    def claimed(self, job_id: str) -> Server | None:
        """The server meant for the job, if any."""
        return self._servers.get(self._claims.get(job_id, -1))

    def hosts_held(self) -> set[str]:
        """Hosts of the servers held, and of those whose release is not confirmed."""
        held = {s.quote.host for s in self._servers.values()}
        if self._releasing:
            held.update(s.quote.host for s in self._releasing.values())
        return held

    def not_to_rent(self) -> set[str]:
        return self.excluded.hosts | self.hosts_held()

    def views(self) -> list[ServerView]:
        return [_view(s) for s in self._servers.values()]

    def idle_views(self) -> list[ServerView]:
        return [_view(s) for s in sorted(self._idle.values(), key=by_id)]


def _nothing() -> None:
    pass


def _no_idle(_server: Server, _now: float) -> None:
    pass


def _view(s: Server) -> ServerView:
    rented_for = s.rented_for if s.rented_for == s.claim else None
    longest = s.quote.max_rental_s if s.rented else None
    ends_at = None if longest is None else s.since + longest
    booting = s.state is BOOTING
    return ServerView(s.id, s.quote, s.rented, booting, s.job, s.claim, rented_for, ends_at)


def by_id(server: Server) -> int:
    return server.id


def label(quote: Quote) -> str:
    """A server for a person: its GPUs and host."""
    gpus = quote.gpu_model if quote.gpu_count <= 1 else f"{quote.gpu_count}x {quote.gpu_model}"
    return f"{gpus or 'server'} #{quote.host}"
