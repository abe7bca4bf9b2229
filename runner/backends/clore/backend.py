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
from collections.abc import Iterable, Mapping, Sequence, Set
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
from runner.backends.clore import bill
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.hedge_log import HEDGE_REASON, HedgeLog
from runner.backends.clore.host_memory import HostRecorder
from runner.backends.clore.market import (
    Offer,
    offers_from_servers,
)
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.quotes import OfferMarket
from runner.backends.clore.rental import CancelledBooting, Rental
from runner.backends.clore.settings import DEFAULT_IMAGE, CloreSettings
from runner.backends.ssh.exec import run_job
from runner.backends.ssh.handover import hand_over
from runner.clock import Clock
from runner.core.hedge import HedgePolicy
from runner.core.model import FailureKind, GpuAsk, Job, Provisioning
from runner.core.rentals import (
    BootTimes,
    Quote,
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerEvent,
    ServerReady,
    ServerReleased,
)
from runner.core.servers import ServerBook
from runner.errors import CloreRunError, InfrastructureError, JobCannotRun, RunMustStop

if TYPE_CHECKING:  # psycopg is an extra: only a run that joins a pool imports it
    from runner.stores.pools.seat import PoolSeat

MARKET_TTL_S = 60.0  # the marketplace is ~2,100 servers: fetch it at most once a minute
MAX_OFFERS_PER_ATTEMPT = 5
_ANY_GPU = GpuAsk()
# What the core plans rent-ahead with until the run has measured its own create -> SSH-ready
# times: a Clore server takes minutes (image pull, boot, sshd).
DEFAULT_BOOT_S = 180.0
# A rent being set up, once cancelled, ends within this: its create answered and its order
# found (or not), its cancel sent and confirmed. A run that ended waits that long for it; a run
# stopped by a signal waits only until its `signal_setup_within_s` is over, and leaves the
# rest to `clore-run cleanup`.
SETUP_ENDS_WITHIN_S = 180.0
# A job that names no image (it runs the default one): the boot bound of a run with no jobs
# yet (a queue server's), whose jobs come later.
_NO_IMAGE_JOB = Job("", "", "true", 0)

log = logging.getLogger("clore_run")


@dataclass(frozen=True)
class GivenOrder:
    """An order given back: its rental, and what it cost where the API said no figure of its
    own (an order given back while booting: what its rent came to; None: not known)."""

    rental: Rental
    fallback_usd: float | None = None

    @property
    def cost_usd(self) -> float | None:
        cost = self.rental.order_cost
        return cost.total_usd if cost is not None else self.fallback_usd


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
    _market: tuple[float, list[Offer]] | None = None
    _live: _LiveMarket | None = None
    _idle_usd: float = 0.0
    _balance_lock: threading.Lock = field(default_factory=threading.Lock)
    _balance_checked: bool = False
    _balance_short: RunMustStop | None = None  # every later rental stops the same way
    _fees_noted: bool = False  # the fee rates assumed are said once per run
    # Each order given back, with what it cost as the API billed it: the attempts' bills
    # hold their shares; these hold the orders'.
    orders_given_back: list[GivenOrder] = field(default_factory=list)
    # Attempts whose server the shutdown gave back under them: their bills, settled then
    # (rental id -> USD), for their `attempt_done` to hand over.
    _settled: dict[int, float] = field(default_factory=dict)
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

    def capacity(self) -> int | None:
        return None  # no places of its own: it rents as many as the run's concurrency allows

    def idle_cost_usd(self) -> float:
        """What servers held with no job on them cost (and orders that never served one)."""
        with self._lock:
            return self._idle_usd

    def _offers(self) -> list[Offer]:
        now = self.clock.now()
        if self._market is None or now - self._market[0] > MARKET_TTL_S:
            rates = self.provisioner.fees().rates  # read first: the offers' $/h include them
            servers = self.client.marketplace().servers
            currency = self.settings.currency
            self._market = (now, offers_from_servers(servers, currency, fees=rates))
        return self._market[1]

    def _hourly(self, job: Job, offer: Offer) -> float:
        """What renting `offer` for `job` costs per hour: a spot bid, not the spot minimum."""
        spot = job.gpu is not None and job.gpu.spot
        price_per_day = self.provisioner.price_per_day(job, offer)
        if price_per_day is None:
            return offer.usd_per_hour(spot) or 0.0  # no bid fits: renting will skip the offer
        return self.provisioner.usd_per_hour(offer, price_per_day, spot)

    def _check_balance(self, offer: Offer, worst_case_usd: float) -> None:
        """Once per run, before the first rental: the wallet of the run's currency must pay
        for that rental's worst case, or nothing is rented at all."""
        with self._balance_lock:  # the other workers wait for the verdict, then share it
            if not self._balance_checked:
                self._balance_checked = True
                try:
                    self._read_balance(offer, worst_case_usd)
                except RunMustStop as exc:
                    self._balance_short = exc
            if self._balance_short is not None:
                raise RunMustStop(self._balance_short.message, self._balance_short.hint)

    def _read_balance(self, offer: Offer, worst_case_usd: float) -> None:
        try:
            wallets = {w.name: w for w in self.client.wallets()}
        except api_errors.InvalidTokenError as exc:
            raise RunMustStop(str(exc)) from None
        except api_errors.CloreApiError:
            return  # not knowing is no reason to stop: the create says not_enough_balance
        currency = self.settings.currency
        wallet = wallets.get(currency)
        balance = wallet.balance if wallet is not None else 0.0
        if balance is None or offer.usd_per_unit is None or offer.usd_per_unit <= 0:
            return
        needed = worst_case_usd / offer.usd_per_unit
        if balance < needed:
            raise RunMustStop(
                f"the {currency} wallet holds {balance:g}, and the first rental may cost "
                f"up to {needed:g} {currency} (${worst_case_usd:.2f}, fees included): "
                "nothing was rented",
                f"top up the {currency} wallet on clore.ai, or pay in another currency "
                "(`currency:` in the pipeline)",
            )

    def _place(self, rental: Rental) -> Place:
        offer = rental.offer
        fees = self.provisioner.fees()
        facts = {
            "rental_id": str(rental.rental_id),
            "server_id": str(offer.server_id),
            "order_id": str(rental.order_id),
            "gpu": offer.gpu_model,
            "gpu_count": str(offer.gpu_count),
            "usd_per_hour": f"{rental.usd_per_hour:.4f}",
            "order_currency": rental.currency,
            "price_per_day": f"{rental.price_per_day:g}",
            "renter_fee_rate": f"{rental.fee_rate:g}",
            "renter_fee_source": fees.source,
        }
        if offer.cuda_version:
            facts["cuda"] = offer.cuda_version
        notes = list(rental.skipped)  # said by the first job on it only
        for timing in ("online_after_s", "ssh_ready_after_s"):  # from the create
            if timing in rental.facts:
                facts[timing] = rental.facts[timing]
        if rental.skipped:
            facts["skipped_hosts"] = "; ".join(rental.skipped)
            rental.skipped = []
        if not self._fees_noted:
            notes += fees.notes
            self._fees_noted = True
        return Place(f"clore-{offer.server_id}", facts, rental.usd_per_hour, notes)

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

    def _bill(self, rental: Rental) -> float:
        """Cost since the last attempt billed on this server (bill.share_since), now on
        the rental's shares."""
        share = bill.share_since(
            rental.usd_per_hour,
            rental.billed_until,
            self.clock.time(),
            rental.held_since,
            rental.creation_fee_usd,
            rental.fee_billed,
        )
        rental.billed_until, rental.fee_billed = share.billed_until, share.fee_billed
        rental.billed_usd = (rental.billed_usd or 0.0) + share.usd
        return share.usd

    def _rest(self, rental: Rental, final_usd: float) -> float:
        """What the order's final figure adds to the shares billed on our own clock, or takes
        back (negative): a preempted spot order stops billing, an order's `ct` is in whole
        seconds. The run's total is then what the provider billed."""
        return final_usd - (rental.billed_usd or 0.0)

    def _give_back_idle(
        self, helds: list[_Held], within_s: float | None = None
    ) -> dict[int, float | None]:
        """Cancel servers with no job on them and confirm; each one's final cost, as the API
        billed it (None: not confirmed). What they cost since their last job is idle time,
        billed before the cancel so that it counts even when the API reports no `spend`."""
        with self._lock:
            idle = {h.rental.rental_id: self._bill(h.rental) for h in helds}
        finals = self.provisioner.release_all([h.rental for h in helds], within_s)
        with self._lock:
            for held in helds:
                final = finals.get(held.rental.rental_id)
                self.orders_given_back.append(GivenOrder(held.rental))
                self._idle_usd += idle[held.rental.rental_id]
                if final is not None:
                    self._idle_usd += self._rest(held.rental, final)
        return finals

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
                    self._settled[h.rental.rental_id] = self._bill(h.rental)
        for rental in booting:  # an order already known is cancelled now, not when its rent
            self.provisioner.send_cancel(rental)  # notices: that may be after SIGKILL
        options = self.provisioner.options
        within_s = options.shutdown_confirm_within_s if stopped else None
        if held:
            self._give_back_idle(held, within_s)
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
        with self._lock:
            given = list(self.orders_given_back)
        return tuple(GivenBack(_offer_label(g.rental.offer), g.cost_usd) for g in given)

    def pool_seat(self) -> PoolSeat | None:
        return self.provisioner.seat

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

    def server_book(
        self,
        jobs: Sequence[Job],
        cap: int,
        budget_usd: float | None,
        provisioning: Provisioning,
        durations_s: Mapping[str, float],
    ) -> ServerBook:
        """The core's book of servers for a run: today's offers, the budget, the cap, and
        boot times allowed as long as the provisioner waits for one."""
        self.provisioner.make_room = lambda: False  # the core decides what is given back
        try:
            market = _LiveMarket(self, self._offers())
        except api_errors.CloreApiError as exc:
            # Nothing can be rented: each job ends saying why, and the reports are written.
            # Its own words (the hint, what to do, is the command's to give): the API names
            # the read that failed, a refused key is the same refusal whichever read met it.
            market = _LiveMarket(self, [], unread=exc.message)
        self._live = market
        bound_s = self.provisioner.options.online_timeout_s  # a dead host is given up then
        memory = self.hosts.memory()
        images = sorted({j.image or DEFAULT_IMAGE for j in jobs})
        market.remember(memory, bound_s, images)  # a host whose cache holds them ranks first
        pulls = replace(memory.pulls, default_image=DEFAULT_IMAGE)
        self.provisioner.pulls = pulls
        # The longest a boot may take, image pull included: what the budget reserves for
        # each rent (a job's own bound where longer: the core's `boot_allowance_s`).
        allowance_s = max(
            (self.provisioner.image_allowance_s(j) for j in jobs),
            default=self.provisioner.image_allowance_s(_NO_IMAGE_JOB),
        )
        expected_s = memory.expected_boot_s() if memory.hosts else DEFAULT_BOOT_S
        book = ServerBook(
            jobs,
            cap,
            market=market,
            budget_usd=budget_usd,
            provisioning=provisioning,
            boot=BootTimes(expected_s, allowance_s),
            durations_s=durations_s,
            now=self.clock.time(),
            hedge=self.hedge,
        )
        book.pulls = pulls
        return book

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
                    self._note_boot_given_back(booting, event.cost_usd)
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
        assert self._live is not None
        offer = self._live.offer(cmd.quote)
        self._refresh_market()  # for the core's next decisions
        try:
            self._check_balance(offer, cmd.worst_case_usd)
            hourly = self._hourly(job, offer)
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
            label = _offer_label(offer)
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
            return RentFailed(cmd.server, exc.message, self._wasted_usd(), fatal=True)
        except JobCannotRun as exc:  # a budget pool refused it: no host would do
            return RentFailed(cmd.server, str(exc), self._wasted_usd(), job_cannot_run=True)
        except CloreRunError as exc:  # a host of its own failing (SkipOffer), or cancelled
            self.hosts.failed(offer.server_id, exc, job.image or DEFAULT_IMAGE)
            with self._lock:
                lost_race = cmd.server in self._hedge_losers
            if lost_race and isinstance(exc, CancelledBooting):
                self.hosts.lost_race(offer.server_id, exc)
            self._refresh_market()
            return RentFailed(cmd.server, str(exc), self._wasted_usd())
        self.hosts.up(rental)
        with self._lock:
            closing = self._closing
            if not closing:
                self._held[rental.rental_id] = _Held(rental)
                self._rentals_of[cmd.server] = rental.rental_id
        if closing:  # shut down while it was being set up: it ran nothing, and cost this
            final = self._give_back_idle([_Held(rental)]).get(rental.rental_id)
            cost = final if final is not None else rental.billed_usd or 0.0
            return RentFailed(cmd.server, "the run is shutting down", cost)
        return ServerReady(cmd.server)

    def _note_boot_given_back(self, rental: Rental, cost_usd: float) -> None:
        """A rent whose order was made and given back before it served a job (a boot that
        failed, a Ctrl-C while it booted) is said at the run's end with the servers it held:
        its job ran on nothing, and the run's total paid for it. With the lock held."""
        ids = {g.rental.rental_id for g in self.orders_given_back}
        if rental.order_id is None or rental.rental_id in ids:
            return  # no order was made, or it was given back as a server held
        self.orders_given_back.append(GivenOrder(rental, cost_usd))

    def _track(self, server: int, rental: Rental) -> None:
        with self._lock:
            if server in self._setting_up:
                self._booting[server] = rental

    def _wasted_usd(self) -> float:
        """What orders cancelled before they served a job cost: the run's, as idle time."""
        wasted = self.provisioner.take_wasted_usd()
        with self._lock:
            self._idle_usd += wasted
        return wasted

    def _refresh_market(self) -> None:
        """A new snapshot for the core, read off its loop, once the one it has is a minute
        old (a queue server runs for days; a host that failed may have been rented away)."""
        if self._live is None:
            return
        before = self._market
        try:
            offers = self._offers()
        except api_errors.CloreApiError:
            return  # the snapshot it has stays: the next rent tries again
        if self._market is not before:
            self._live.update(offers)

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
                self._idle_usd += self._bill(held.rental)
            held.job = job
            held.place = self._place(held.rental)
            held.place.facts.update(self.hedges.facts(job.id, server))
            return held.place

    def attempt_done(self, place: Place) -> AttemptBill | None:
        held = self._find(place)
        if held is None:  # given back under it (a shutdown): that settled the attempt's share
            with self._lock:
                settled = self._settled.pop(int(place.facts.get("rental_id", "-1")), None)
            return AttemptBill(settled) if settled is not None else None
        with self._lock:
            job, held.job = held.job, None
            owed = AttemptBill(self._bill(held.rental))
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

    def hand_over(self, place: Place, server: int, worst_case_usd: float) -> Rental:
        """The rental `place` is on leaves the run with its order live: it is not given back
        here, ever (neither by `release_server` nor by `shutdown`). Raises when it is no
        longer held."""
        with self._lock:
            held = self._held.pop(int(place.facts.get("rental_id", "-1")), None)
            if held is None:
                raise InfrastructureError(f"server {server} is no longer held")
            self._rentals_of.pop(server, None)
            self._handed[server] = (held.rental.rental_id, worst_case_usd)
        return held.rental

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
        final = self._give_back_idle([held]).get(held.rental.rental_id)
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


class _LiveMarket(OfferMarket):
    """The marketplace as the core sees it: the last snapshot fetched, priced as the
    provisioner will rent (a spot order bids over the rivals in its server's book), and every
    offer seen this run kept for fitting (a server we hold is listed as rented)."""

    def __init__(self, backend: CloreBackend, offers: list[Offer], unread: str = "") -> None:
        super().__init__(offers, backend.settings.currency)
        self._backend = backend
        self._unread = unread  # why there is no snapshot, if there is none

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        return self._unread or super().why_none(ask, excluded)

    def update(self, offers: Iterable[Offer]) -> None:
        self._unread = ""
        super().update(offers)

    def quote(self, offer: Offer, ask: GpuAsk) -> Quote | None:
        quote = super().quote(offer, ask)
        if quote is None:
            return None
        fee = self._backend.provisioner.creation_fee_usd(offer, ask.spot)
        return replace(quote, creation_fee_usd=fee, fee_rate=offer.fee_rate(ask.spot))

    def rival_bids(self, offer: Offer) -> Iterable[float]:
        # The last book read, however old: the core's loop never waits for the API. A rent
        # reads it afresh (off the loop) and asks for a new price if the bid moved up.
        return self._backend.provisioner.known_rival_bids(offer.server_id)


def _offer_label(offer: Offer) -> str:
    """`RTX 4090 #88028`, `2x RTX 4090 #88028`: what the live view says is being rented."""
    gpus = offer.gpu_model if offer.gpu_count == 1 else offer.gpus
    return f"{gpus} #{offer.server_id}"
