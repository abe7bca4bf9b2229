"""The `clore` backend: the core's adapter for servers rented on Clore.

The core decides which offer to rent for which job, when (ahead of a job's needs), which job
runs on which server and when one is given back, within the budget and the cap, for `clore-run
run` and `clore-run serve` alike; this backend carries that out (`rent`, `place`,
`attempt_done`, `release_server`) and reports what became of each server. It reads the
marketplace and the spot books only off the driver's loop (on a rent's thread, or before the
run), so that deciding never waits for the API.

Shutdown (every exit path, signals included) cancels everything held, and every rental being
set up, and confirms in one sweep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runner.backends.base import (
    NO_STAGES,
    AttemptBill,
    GivenBack,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    ServerReport,
    StageSink,
    Unproven,
)
from runner.backends.clore.api import CloreClient
from runner.backends.clore.balance import BalanceCheck
from runner.backends.clore.errors import TransportError
from runner.backends.clore.hedge_log import HEDGE_REASON, HedgeLog
from runner.backends.clore.host_memory import HostRecorder
from runner.backends.clore.live_market import MarketFeed
from runner.backends.clore.place_facts import offer_label, place_on
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.rental import CancelledBooting, Rental
from runner.backends.clore.settings import DEFAULT_IMAGE, CloreSettings
from runner.backends.clore.spend import Spend
from runner.backends.ssh.exec import run_job
from runner.backends.ssh.handover import hand_over
from runner.clock import Clock
from runner.core.book_offer import BookOffer
from runner.core.hedge import HedgePolicy
from runner.core.model import FailureKind, Job
from runner.core.rentals import (
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerEvent,
    ServerReady,
    ServerReleased,
)
from runner.errors import CloreRunError, InfrastructureError, JobCannotRun, RunMustStop

if TYPE_CHECKING:  # psycopg is an extra: only a run that joins a pool imports it
    from runner.stores.pools.seat import PoolSeat

# A rent being set up, once cancelled, ends within this: its create answered and its order
# found (or not), its cancel sent and confirmed. A run that ended waits that long for it; a run
# stopped by a signal waits only until its `signal_setup_within_s` is over, and leaves the
# rest to `clore-run cleanup`.
SETUP_ENDS_WITHIN_S = 180.0

log = logging.getLogger("clore_run")


@dataclass
class _Held:
    rental: Rental
    job: Job | None = None  # the job running on it; None: idle
    place: Place | None = None  # what the running job was handed


@dataclass
class CloreBackend:
    client: CloreClient
    provisioner: Provisioner
    clock: Clock
    # The file's Clore keys (what orders are paid in). The run's concurrency and budget are
    # not the backend's: the core holds them (ServerBook), from the settings the run resolved.
    settings: CloreSettings
    name: str = "clore"
    # The core's server number -> the rental carrying it out, each rental held, the rentals
    # being set up (their cancel: shutdown sets it), and the hosts a job's rents skipped.
    _held: dict[int, _Held] = field(default_factory=dict)  # rental id -> server
    _rentals_of: dict[int, int] = field(default_factory=dict)
    _setting_up: dict[int, threading.Event] = field(default_factory=dict)
    _booting: dict[int, Rental] = field(default_factory=dict)  # server -> its rental, once known
    # Servers the core gave back while their rent was under way: what each rent came to.
    _given_back_booting: dict[int, ServerEvent | None] = field(default_factory=dict)
    _skipped: dict[str, list[str]] = field(default_factory=dict)
    _hedge_losers: set[int] = field(default_factory=set)  # given back: another answered first
    # Guards the maps above (rents, releases and attempts run on threads of their own); the
    # shutdown waits on it for the rentals being set up.
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _closing: bool = False
    _hurry_at: float | None = None  # when the run was told to stop (monotonic seconds)
    _fees_noted: bool = False  # the fee rates assumed are said once per run
    # The host history (what each host did, across runs), hedged boots' policy and record.
    hosts: HostRecorder = field(default_factory=HostRecorder)
    hedge: HedgePolicy = field(default_factory=HedgePolicy)
    hedges: HedgeLog = field(default_factory=HedgeLog)
    # Servers handed over to what lives on them past the run (a GitHub runner, which `clore-run
    # runner stop` cancels): never given back here. The core's number -> (rental id, what the
    # server may still cost: its worst case, which the core's budget keeps counting).
    _handed: dict[int, tuple[int, float]] = field(default_factory=dict)
    # A queue's: between two jobs on a server, the first's leftovers are checked for
    # (runner/backends/ssh/handover.py); a server that fails goes back, never reused.
    handover_mark: str | None = None
    # The marketplace for the core, the wallet check, and the money outside the attempts.
    market: MarketFeed = field(init=False)
    balance: BalanceCheck = field(init=False)
    spend: Spend = field(init=False)

    def __post_init__(self) -> None:
        currency = self.settings.currency
        self.market = MarketFeed(self.client, self.provisioner, self.clock, currency)
        self.balance = BalanceCheck(self.client, currency)
        self.spend = Spend(self.clock, self.provisioner)

    def capacity(self) -> int | None:
        return None  # no places of its own: it rents as many as the run's concurrency allows

    def idle_cost_usd(self) -> float:
        """What servers held with no job on them cost (and orders that never served one)."""
        return self.spend.idle_usd()

    # -- running on a server ---------------------------------------------------------------

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        held = self._find(place)
        if held is None or held.rental.conn is None:
            return RunOutcome(None, FailureKind.SERVER_LOST, "the server is no longer held")
        outcome = run_job(held.rental.conn, request, sink, cancel, stages=stages)
        if outcome.failure in (FailureKind.SERVER_LOST, FailureKind.SSH_FAILED):
            won, said = self.provisioner.win_back(held.rental, cancel)  # a spot order outbid
            if said:
                stages.note(said)
            if won:  # the job died with the container; the core keeps it for the job's retry
                return replace(outcome, message="; ".join(filter(None, [outcome.message, said])))
            held.rental.lost = True  # gone: the core gives it back, and excludes its host
            self.hosts.lost(held.rental.offer.server_id)
        return outcome

    def _find(self, place: Place) -> _Held | None:
        with self._lock:
            return self._held.get(int(place.facts.get("rental_id", "-1")))

    def stop_soon(self) -> None:
        """The run is being stopped (a signal): every wait of the give-back is cut to what
        fits in CI's grace, the cancels sent first."""
        if not self.provisioner.hurry.is_set():
            self._hurry_at = time.monotonic()
            self.provisioner.hurry.set()

    def shutdown(self) -> None:
        """Give back everything held, all orders cancelled first and then confirmed together.
        Idempotent: the driver calls it as soon as a run is cancelled, and again at the end."""
        with self._lock:
            self._closing = True
            for cancel in self._setting_up.values():
                cancel.set()  # each cancels its own order, if it made one
            booting = list(self._booting.values())
            held = list(self._held.values())
            self._held.clear()
            self._rentals_of.clear()
            # Jobs still running: the run was stopped (a signal, say), and everything must be
            # cancelled within GitHub's grace, so confirming is cut short and the rest left to
            # the cleanup step. A run that ended confirms in full.
            stopped = self.provisioner.hurry.is_set() or any(h.job is not None for h in held)
            for h in held:
                if h.job is not None and h.place is not None:
                    # Its attempt_done() will find the server gone: settle the attempt's
                    # share now, so the run does not price it again (the rest is idle).
                    self.spend.settle_at_shutdown(h.rental)
        for rental in booting:  # an order already known is cancelled now, not when its rent
            self.provisioner.send_cancel(rental)  # notices: that may be after SIGKILL
        options = self.provisioner.options
        within_s = options.shutdown_confirm_within_s if stopped else None
        if held:
            self.spend.give_back_idle([h.rental for h in held], within_s)
        self._wait_for_setups(SETUP_ENDS_WITHIN_S)
        self.provisioner.close_pool()
        self.hosts.close()
        self._check_ledger()

    def unproven_orders(self) -> tuple[Unproven, ...]:
        """Orders this run's creates made that could not be proven ours, left running: what
        happened and what to do, each. `run` names them at its end and exits 3."""
        with self.provisioner._lock:
            return tuple(Unproven(what, hint) for what, hint in self.provisioner.unproven)

    def given_back(self) -> tuple[GivenBack, ...]:
        given = list(self.spend.given)
        return tuple(GivenBack(offer_label(g.rental.offer), g.cost_usd) for g in given)

    def pool_seat(self) -> PoolSeat | None:
        return self.provisioner.seat

    def check_access(self) -> str | None:
        # The fee read every first rent makes anyway (kept for the run): made early, it costs
        # no extra call and a refused key is said at once.
        try:
            self.provisioner.fees()
        except TransportError as exc:
            return f"{exc.message}; jobs that need a rental cannot start until it answers"
        return None

    def _check_ledger(self) -> None:
        """Say so when this run leaves a rental it could not confirm released (an ambiguous
        create whose order never showed, a cancel the API did not confirm): it may bill."""
        ledger, run_id = self.provisioner.ledger, self.provisioner.run_id
        try:
            left = ledger.unreleased(run_id)
        except InfrastructureError:
            return
        handed = {rental_id for rental_id, _ in self._handed.values()}
        left = [r for r in left if r.id not in handed]
        if left:
            servers = ", ".join(str(r.server_id) for r in left)
            raise InfrastructureError(
                f"{len(left)} rental(s) of run {run_id} not confirmed released (servers {servers})",
                f"run `clore-run cleanup --run {run_id}`",
            )

    # -- the core's adapter ------------------------------------------------------------------

    def book_offer(self, jobs: Sequence[Job], cap: int) -> BookOffer:
        """Today's offers, and boot times allowed as long as the provisioner waits for one;
        the core builds its book from them, with the run's budget and cap."""
        self.provisioner.make_room = lambda: False  # the core decides what is given back
        return self.market.book_offer(jobs, self.hosts, self.hedge)

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        """Rent the core's choice and say whether it came up (on a thread of the driver)."""
        cancel = threading.Event()
        with self._lock:
            closing = self._closing
            if not closing:
                self._setting_up[cmd.server] = cancel
        if closing:
            report(RentFailed(cmd.server, "the run is shutting down"))
            return
        event: ServerEvent | None = None
        try:
            event = self._rent_for_core(cmd, job, cancel, stages, report)
        finally:
            with self._lock:
                self._setting_up.pop(cmd.server, None)
                booting = self._booting.pop(cmd.server, None)
                if isinstance(event, RentFailed) and booting is not None:
                    self.spend.boot_given_back(booting, event.cost_usd)
                if cmd.server in self._given_back_booting:
                    self._given_back_booting[cmd.server] = event
                self._lock.notify_all()
        if isinstance(event, RentFailed) and not event.fatal and not event.requote:
            self._skipped.setdefault(job.id, []).append(event.reason)
        report(event)

    def _rent_for_core(
        self,
        cmd: RentServer,
        job: Job,
        cancel: threading.Event,
        stages: StageSink,
        report: ServerReport,
    ) -> ServerEvent:
        assert self.market.live is not None
        offer = self.market.live.offer(cmd.quote)
        self.market.refresh()  # for the core's next decisions
        try:
            self.balance.check(offer, cmd.worst_case_usd)
            hourly = self.market.hourly(job, offer)
            if hourly > cmd.quote.usd_per_hour * (1 + 1e-6) + 1e-9:
                # The spot book, read just now, moved since the core priced the quote with
                # the last one read: the budget reserved less than this. The core prices it
                # again with this book; the host is not to blame.
                return RentFailed(
                    cmd.server,
                    f"server {offer.server_id}: the bid it needs now (${hourly:.4f}/h) is "
                    f"over the ${cmd.quote.usd_per_hour:.4f}/h reserved for it",
                    requote=True,
                )
            label = offer_label(offer)
            self.hedges.rented(cmd, label)
            hedging = " (a hedge: its other boot runs late)" if cmd.hedge_of is not None else ""
            stages.stage("renting", label + hedging, hourly)
            rental = self.provisioner.rent(
                job,
                offer,
                cancel,
                stages,
                track=lambda r: self._track(cmd.server, r),
                deploying=lambda: report(ServerDeploying(cmd.server)),
            )
        except RunMustStop as exc:
            return RentFailed(cmd.server, exc.message, self.spend.wasted(), fatal=True)
        except JobCannotRun as exc:  # a budget pool refused it: no host would do
            return RentFailed(cmd.server, str(exc), self.spend.wasted(), job_cannot_run=True)
        except CloreRunError as exc:  # a host of its own failing (SkipOffer), or cancelled
            self.hosts.failed(offer.server_id, exc, job.image or DEFAULT_IMAGE)
            with self._lock:
                lost_race = cmd.server in self._hedge_losers
            if lost_race and isinstance(exc, CancelledBooting):
                self.hosts.lost_race(offer.server_id, exc)
            self.market.refresh()
            return RentFailed(cmd.server, str(exc), self.spend.wasted())
        self.hosts.up(rental)
        with self._lock:
            closing = self._closing
            if not closing:
                self._held[rental.rental_id] = _Held(rental)
                self._rentals_of[cmd.server] = rental.rental_id
        if closing:  # shut down while it was being set up: it ran nothing, and cost this
            final = self.spend.give_back_idle([rental]).get(rental.rental_id)
            cost = final if final is not None else rental.billed_usd or 0.0
            return RentFailed(cmd.server, "the run is shutting down", cost)
        return ServerReady(cmd.server)

    def _track(self, server: int, rental: Rental) -> None:
        with self._lock:
            if server in self._setting_up:
                self._booting[server] = rental

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        with self._lock:
            held = self._held.get(self._rentals_of.get(server, -1))
            if held is None or held.rental.lost:
                raise InfrastructureError(f"{job.id}: its server is no longer held")
            if not self.provisioner.cover(held.rental, job):
                raise InfrastructureError(f"{job.id}: the budget pool cannot cover it now")
            held.rental.skipped = self._skipped.pop(job.id, []) + held.rental.skipped
            if held.rental.job_id != job.id or held.rental.billed_usd is not None:
                # A server that waited for this job (kept warm, rented for warmth or for
                # another job): the time since its last bill was idle, nobody's job's.
                self.spend.idle(held.rental)
            held.job = job
            held.place = place_on(held.rental, self.provisioner.fees(), not self._fees_noted)
            self._fees_noted = True
            held.place.facts.update(self.hedges.facts(job.id, server))
            return held.place

    def attempt_done(self, place: Place) -> AttemptBill | None:
        held = self._find(place)
        if held is None:  # given back under it (a shutdown): that settled the attempt's share
            with self._lock:
                settled = self.spend.settled(int(place.facts.get("rental_id", "-1")))
            return AttemptBill(settled) if settled is not None else None
        with self._lock:
            job, held.job = held.job, None
            owed = AttemptBill(self.spend.share(held.rental))
        place.facts.update(self.hedges.cost_facts(held.rental.job_id))
        conn = held.rental.conn
        if self.handover_mark is None or job is None or conn is None or not conn.alive:
            return owed
        left = hand_over(conn, job.id, self.handover_mark)
        if left:  # never reused: the core gives a lost server back
            log.warning("%s failed the clean handover after %s: %s", place.name, job.id, left)
            with self._lock:
                held.rental.lost = True
        return owed

    def rental_at(self, place: Place) -> Rental | None:
        """The rental `place` is on, for work of the caller's own over its SSH connection
        (a runner's install); None once it is no longer held."""
        held = self._find(place)
        return held.rental if held is not None else None

    def hand_off(self, place: Place, server: int, job: Job) -> None:
        """The rental `place` is on leaves the run with its order live: it is not given back
        here, ever (neither by `release_server` nor by `shutdown`), and may cost all of its
        worst case for `job`. Raises when it is no longer held."""
        held = self._find(place)
        # Priced before the lock is taken: a spot price may read the server's spot book.
        worst_usd = self.provisioner.worst_case_usd(job, held.rental.offer) if held else 0.0
        with self._lock:
            if held is None or self._held.pop(held.rental.rental_id, None) is None:
                raise InfrastructureError(f"server {server} is no longer held")
            self._rentals_of.pop(server, None)
            self._handed[server] = (held.rental.rental_id, worst_usd)

    def lost(self, server: int) -> bool:
        with self._lock:
            held = self._held.get(self._rentals_of.get(server, -1))
            return held is None or held.rental.lost

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        with self._lock:
            handed = self._handed.get(server)
        if handed is not None:  # not ours to give back: it may cost all of its worst case
            report(ServerReleased(server, handed[1]))
            return
        if reason.startswith(HEDGE_REASON):
            with self._lock:  # before its rent hears the cancel: the rent says what it was
                self._hedge_losers.add(server)
        booted = self._stop_rent(server)
        with self._lock:
            held = self._held.pop(self._rentals_of.pop(server, -1), None)
        if held is None:
            # Given back while booting: its rent cancelled its own order, and cost this.
            cost = booted.cost_usd if isinstance(booted, RentFailed) else None
            self.hedges.given_back(server, reason, cost)
            report(ServerReleased(server, cost))
            return
        final = self.spend.give_back_idle([held.rental]).get(held.rental.rental_id)
        # The API's figure; without one (no `spend` in its reply), what this order was billed
        # here, from its create to now: either replaces the core's estimate.
        billed = held.rental.billed_usd or 0.0
        self.hedges.given_back(server, reason, final if final is not None else billed)
        report(ServerReleased(server, final if final is not None else billed))

    def _stop_rent(self, server: int) -> ServerEvent | None:
        """A server given back while its rent is under way: the rent is cancelled (its order
        too, at once, if known) and waited for, so that ServerReleased means the order is
        gone and says what it cost. Its outcome (None: it was not being rented)."""
        with self._lock:
            cancel = self._setting_up.get(server)
            if cancel is None:
                return None
            cancel.set()
            rental = self._booting.get(server)
            self._given_back_booting[server] = None
        if rental is not None:
            self.provisioner.send_cancel(rental)
        with self._lock:
            while server in self._setting_up:
                self._lock.wait()
            return self._given_back_booting.pop(server)

    def _wait_for_setups(self, within_s: float) -> None:
        """Rentals still being set up cancel their own orders: wait (a while) for them, so
        that the ledger check after this sees them gone."""
        # Real seconds: the rentals' threads run on them, whatever clock the run is on.
        deadline = time.monotonic() + within_s
        with self._lock:
            while self._setting_up and time.monotonic() < self._bound(deadline):
                self._lock.wait(timeout=0.05)

    def _bound(self, deadline: float) -> float:
        """`deadline`, or sooner once a signal asked the run to stop."""
        if self._hurry_at is None:
            return deadline
        return min(deadline, self._hurry_at + self.provisioner.options.signal_setup_within_s)
