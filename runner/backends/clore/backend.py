"""The `clore` backend: rents servers on Clore, runs jobs on them, and gives every one back.

Two ways to drive it. `clore-run run` drives it as the core's adapter (`ServerAdapter`): the
core decides which offer to rent for which job, when (ahead of a job's needs), which job runs
on which server and when one is given back, within the budget and the cap; this backend only
carries that out (`rent`, `place`, `attempt_done`, `release_server`) and reports what became
of each server. `clore-run serve`, whose jobs arrive over time, still drives it through
`acquire` and `release`, where it decides reuse, budget and the cap itself:

- acquire: a free rented server that fits the job, else the best offer within the budget, rented
  through `Provisioner` (a host that fails is excluded for the run and the next offer tried).
- release: a server that a job still waiting could use is kept; otherwise it is cancelled.

Either way, shutdown (every exit path, signals included) cancels everything held, and every
rental being set up, and confirms in one sweep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from runner.backends.base import (
    NO_STAGES,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    ServerReport,
    StageSink,
)
from runner.backends.clore import errors as api_errors
from runner.backends.clore.api import CloreClient
from runner.backends.clore.market import (
    Offer,
    best_offer,
    explain_no_fit,
    misses,
    offers_from_servers,
    per_hour,
    spot_bid_per_day,
)
from runner.backends.clore.provision import ProvisionCancelled, Provisioner, Rental, SkipOffer
from runner.backends.clore.quotes import OfferMarket
from runner.backends.ssh.exec import run_job
from runner.clock import Clock
from runner.core import money
from runner.core.model import FailureKind, GpuAsk, Job, Provisioning
from runner.core.money import usd_text
from runner.core.rentals import (
    BootTimes,
    Quote,
    RentFailed,
    RentServer,
    ServerEvent,
    ServerReady,
    ServerReleased,
)
from runner.core.servers import ServerBook
from runner.errors import CloreRunError, InfrastructureError, JobCannotRun, RunMustStop

MARKET_TTL_S = 60.0  # the marketplace is ~2,100 servers: fetch it at most once a minute
MAX_OFFERS_PER_ATTEMPT = 5
_ANY_GPU = GpuAsk()
# What the core plans rent-ahead with until the run has measured its own create -> SSH-ready
# times: a Clore server takes minutes (image pull, boot, sshd).
DEFAULT_BOOT_S = 180.0


@dataclass
class Budget:
    """Spent + committed + the new rental's worst case must fit `limit_usd`: a budget is a
    ceiling that must hold before money is committed, never an estimate."""

    limit_usd: float | None
    spent_usd: float = 0.0  # rentals already given back

    def shortfall(self, committed_usd: float, new_usd: float) -> float:
        """How much over the limit a new rental would go (<= 0: it fits)."""
        if self.limit_usd is None:
            return 0.0
        return self.spent_usd + committed_usd + new_usd - self.limit_usd


@dataclass
class _Held:
    rental: Rental
    job: Job | None = None  # the job running on it; None: idle
    job_started: float = 0.0
    place: Place | None = None  # what the running job was handed


@dataclass
class CloreBackend:
    client: CloreClient
    provisioner: Provisioner
    clock: Clock
    concurrency: int
    budget: Budget
    currency: str
    name: str = "clore"
    _held: dict[int, _Held] = field(default_factory=dict)  # rental id -> server
    _pending: list[Job] = field(default_factory=list)
    _excluded: set[int] = field(default_factory=set)
    _market: tuple[float, list[Offer]] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closing: bool = False
    _releasers: list[threading.Thread] = field(default_factory=list)
    _idle_usd: float = 0.0
    _reserved: list[float] = field(default_factory=list)  # USD of rentals being set up
    _choosing: set[int] = field(default_factory=set)  # servers being ordered
    _balance_lock: threading.Lock = field(default_factory=threading.Lock)
    _balance_checked: bool = False
    _balance_short: RunMustStop | None = None  # every later rental stops the same way
    _fees_noted: bool = False  # the fee rates assumed are said once per run
    # As the core's adapter: the core's server number -> the rental carrying it out, the
    # rentals being set up (their cancel: shutdown sets it), hosts a job's rents skipped.
    _rentals_of: dict[int, int] = field(default_factory=dict)
    _setting_up: dict[int, threading.Event] = field(default_factory=dict)
    _skipped: dict[str, list[str]] = field(default_factory=dict)
    _live: _LiveMarket | None = None
    # Each order given back, with what it cost as the API billed it (`order_*_usd`): the
    # attempts' facts hold their shares; these hold the orders'.
    orders_given_back: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.provisioner.make_room = self._give_back_one_idle

    def _give_back_one_idle(self) -> bool:
        """One idle server given back (one no waiting job wants first): a full pool waits for
        servers, and this run's own idle one must not be what it waits for."""
        with self._cond:
            idle = sorted((h for h in self._held.values() if h.job is None), key=self._wanted)
            if not idle:
                return False
            del self._held[idle[0].rental.rental_id]
        self._give_back_idle(idle[:1])
        return True

    def capacity(self) -> int | None:
        return self.concurrency

    def set_pending(self, jobs: Sequence[Job]) -> None:
        with self._cond:
            self._pending = list(jobs)
            useless = [h for h in self._held.values() if h.job is None and not self._wanted(h)]
            for held in useless:
                del self._held[held.rental.rental_id]
        if useless:  # nobody waiting can use them: stop paying now, off the driver's loop
            worker = threading.Thread(target=self._give_back_idle, args=(useless,), daemon=True)
            self._releasers.append(worker)
            worker.start()

    # -- acquire ---------------------------------------------------------------------------

    def acquire(self, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES) -> Place:
        reused = self._take_idle(job)
        if reused is not None:
            return reused
        tried: list[str] = []
        for _ in range(MAX_OFFERS_PER_ATTEMPT):
            self._stop_if_stopping(cancel)
            self._make_room()
            try:
                offer = self._choose(job)  # marked as ours: no other worker orders it too
            except JobCannotRun as exc:
                if not tried:
                    raise
                # The hosts that fit were tried and excluded: say why, not just "no offer".
                raise InfrastructureError(
                    f"{job.id}: {len(tried)} offers failed to start: " + "; ".join(tried[-3:]),
                    exc.message,
                ) from None
            try:
                reserved = self._wait_for_budget(job, offer, cancel)
                try:
                    self._stop_if_stopping(cancel)  # waiting for money can take long
                    stages.stage("renting", _offer_label(offer), self._hourly(job, offer))
                    rental = self.provisioner.rent(job, offer, cancel, stages)
                except SkipOffer as exc:
                    self._end_renting(reserved)
                    with self._cond:
                        self._excluded.add(offer.server_id)
                    tried.append(f"server {offer.server_id} excluded: {exc}")
                    stages.note(f"{exc}; trying the next offer")
                    continue
                except BaseException:
                    self._end_renting(reserved)
                    raise
                rental.skipped = tried
                return self._hold(rental, job, reserved)
            finally:
                with self._cond:
                    self._choosing.discard(offer.server_id)
        raise InfrastructureError(
            f"{job.id}: {len(tried)} offers failed to start: " + "; ".join(tried[-3:])
        )

    def _stop_if_stopping(self, cancel: threading.Event) -> None:
        """No new order once the attempt is cancelled or the run shuts down: it would cost a
        creation fee, and its create would hold the API during the shutdown's cancels."""
        with self._cond:
            closing = self._closing
        if closing:
            raise InfrastructureError("the run is shutting down")
        if cancel.is_set():
            raise ProvisionCancelled("cancelled before renting")

    def _make_room(self) -> None:
        """`concurrency` caps the servers held, idle ones included: before a new rental, give
        back idle servers (those no waiting job wants first) until there is room for it."""
        with self._cond:
            idle = sorted(
                (h for h in self._held.values() if h.job is None), key=self._wanted
            )  # False (unwanted) first
            over = len(self._held) + len(self._choosing) + 1 - self.concurrency
            spare = idle[: max(0, over)]
            for held in spare:
                del self._held[held.rental.rental_id]
        if spare:
            self._give_back_idle(spare)

    def _take_idle(self, job: Job) -> Place | None:
        ask = job.gpu or _ANY_GPU
        with self._cond:
            for held in self._held.values():
                free = held.job is None and not held.rental.lost
                # In a pool, a kept server's reservation must grow to cover the new job.
                if free and _fits(held.rental, ask) and self.provisioner.cover(held.rental, job):
                    held.job, held.job_started = job, self.clock.time()
                    held.place = self._place(held.rental)
                    return held.place
        return None

    def _choose(self, job: Job) -> Offer:
        """The best offer, leaving out the servers this run holds or is ordering: the cached
        marketplace still shows them free, and ordering one again wastes a create, excludes a
        good host, and after an ambiguous create could adopt the other rental's order."""
        ask = job.gpu or _ANY_GPU
        offers = self._offers()
        with self._cond:
            excluded = set(self._excluded)
            ours = self._choosing | {h.rental.offer.server_id for h in self._held.values()}
            offer = best_offer(offers, ask, excluded | ours)
            if offer is not None:
                self._choosing.add(offer.server_id)
                return offer
        if best_offer(offers, ask, excluded) is not None:  # a retry may find one of ours free
            raise InfrastructureError(f"{job.id}: every server that fits is in use by this run")
        raise JobCannotRun(explain_no_fit(offers, ask, self.currency, excluded))

    def _offers(self) -> list[Offer]:
        now = self.clock.now()
        if self._market is None or now - self._market[0] > MARKET_TTL_S:
            rates = self.provisioner.fees().rates  # read first: the offers' $/h include them
            servers = self.client.marketplace().servers
            self._market = (now, offers_from_servers(servers, self.currency, fees=rates))
        return self._market[1]

    def _wait_for_budget(self, job: Job, offer: Offer, cancel: threading.Event) -> float:
        """Wait until the rental's worst case fits the budget, then reserve it until it is
        held (so a rental being set up in another worker counts) and return the amount."""
        spot = job.gpu is not None and job.gpu.spot
        price = self._hourly(job, offer)
        # Billed from the create: starting (image pull included) and then the job's timeout.
        hold_s = self.provisioner.boot_timeout_s(job) + job.timeout_s
        fee_usd = self.provisioner.creation_fee_usd(offer, spot)
        new_usd = money.worst_case_usd(price, hold_s, fee_usd)
        self._check_balance(offer, new_usd)
        with self._cond:
            while True:
                over = self.budget.shortfall(self._committed_usd(), new_usd)
                if over <= 0:
                    self._reserved.append(new_usd)
                    return new_usd
                busy = self._reserved or any(h.job is not None for h in self._held.values())
                if not busy or cancel.is_set():
                    raise JobCannotRun(
                        f"budget {usd_text(self.budget.limit_usd or 0.0)} would be exceeded by "
                        f"{usd_text(over)}: spent {usd_text(self.budget.spent_usd)} + committed "
                        f"{usd_text(self._committed_usd())} + this rental {usd_text(new_usd)} "
                        f"(${price:.4f}/h with the {offer.fee_rate(spot) * 100:g} % renter fee "
                        f"x {hold_s / 3600:.2f} h: start-up and the job's timeout"
                        + (
                            f", + {usd_text(fee_usd)} creation fee)"
                            if money.creation_fee_charged(hold_s)
                            else ")"
                        )
                    )
                self._cond.wait(timeout=1.0)  # a server given back frees money

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
        wallet = wallets.get(self.currency)
        balance = wallet.balance if wallet is not None else 0.0
        if balance is None or offer.usd_per_unit is None or offer.usd_per_unit <= 0:
            return
        needed = worst_case_usd / offer.usd_per_unit
        if balance < needed:
            raise RunMustStop(
                f"the {self.currency} wallet holds {balance:g}, and the first rental may cost "
                f"up to {needed:g} {self.currency} (${worst_case_usd:.2f}, fees included): "
                "nothing was rented",
                f"top up the {self.currency} wallet on clore.ai, or pay in another currency "
                "(`currency:` in the pipeline)",
            )

    def _committed_usd(self) -> float:
        """Cost so far of what is held, plus each running job's price x its remaining timeout,
        plus the reservations of rentals being set up."""
        now = self.clock.time()
        total = sum(self._reserved)
        for held in self._held.values():
            rental = held.rental
            total += rental.usd_per_hour * max(0.0, now - rental.held_since) / 3600
            total += rental.creation_fee_usd
            if held.job is not None:
                left = held.job_started + held.job.timeout_s - now
                total += rental.usd_per_hour * max(0.0, left) / 3600
        return total

    def _hold(self, rental: Rental, job: Job, reserved_usd: float) -> Place:
        with self._cond:
            self._reserved.remove(reserved_usd)  # now committed as a held rental
            place = self._place(rental)
            self._held[rental.rental_id] = _Held(rental, job, self.clock.time(), place)
            if self._closing:  # shut down while we were renting
                del self._held[rental.rental_id]
                closing = True
            else:
                closing = False
        if closing:
            self._give_back_idle([_Held(rental)])  # it ran nothing: its cost is the run's
            raise InfrastructureError("the run is shutting down")
        return place

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

    # -- run and release -------------------------------------------------------------------

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
            if won:  # the job died with the container; its retry runs here at the new bid
                held.rental.won_back = True
                return replace(outcome, message="; ".join(filter(None, [outcome.message, said])))
            held.rental.lost = True  # gone: the retry goes to another host
            with self._cond:
                self._excluded.add(held.rental.offer.server_id)
        return outcome

    def release(self, place: Place) -> None:
        """`acquire`'s counterpart (serve): the backend decides whether to keep the server."""
        held = self._find(place)
        if held is None:
            return
        with self._cond:
            finished_job = held.job
            held.job = None
            # A server won back is kept for the retry of the job it lost (running, that job
            # is not among the waiting ones yet); `set_pending` gives it back if none comes.
            wanted = self._wanted(held) or held.rental.won_back
            held.rental.won_back = False
            keep = not held.rental.lost and not self._closing and wanted
            if not keep:
                self._held.pop(held.rental.rental_id, None)
            place.facts["cost_usd"] = f"{self._bill(held.rental):.6f}"
        if not keep:
            final = self._give_back([held]).get(held.rental.rental_id)
            if final is not None and finished_job is not None:
                # The API's own figure settles the rental: the last user gets the rest.
                billed = float(place.facts["cost_usd"])
                place.facts["cost_usd"] = f"{billed + self._rest(held.rental, final):.6f}"
            place.facts.update(
                {k: v for k, v in held.rental.facts.items() if k.startswith("order_")}
            )
        with self._cond:
            self._cond.notify_all()

    def _bill(self, rental: Rental) -> float:
        """Cost since the last attempt billed on this server, renter fee included; the
        creation fee goes to the attempt that sees the order past 10 minutes (Clore charges
        none for an order cancelled sooner; the final settlement catches one it passes later)."""
        now = self.clock.time()
        cost = rental.usd_per_hour * max(0.0, now - rental.billed_until) / 3600
        if not rental.fee_billed and money.creation_fee_charged(now - rental.held_since):
            cost += rental.creation_fee_usd
            rental.fee_billed = True
        rental.billed_until = now
        rental.facts["billed_usd"] = f"{float(rental.facts.get('billed_usd', 0)) + cost:.6f}"
        return cost

    def _rest(self, rental: Rental, final_usd: float) -> float:
        return max(0.0, final_usd - float(rental.facts.get("billed_usd", 0)))

    def _give_back(
        self, helds: list[_Held], within_s: float | None = None
    ) -> dict[int, float | None]:
        finals = self.provisioner.release_all([h.rental for h in helds], within_s)
        with self._cond:
            self.orders_given_back += [
                {"server_id": str(h.rental.offer.server_id), **h.rental.facts} for h in helds
            ]
            for held in helds:
                final = finals.get(held.rental.rental_id)
                billed = float(held.rental.facts.get("billed_usd", 0))
                self.budget.spent_usd += final if final is not None else billed
            self._cond.notify_all()
        return finals

    def _give_back_idle(
        self, helds: list[_Held], within_s: float | None = None
    ) -> dict[int, float | None]:
        """Servers with no job on them: what they cost since their last job is the run's.
        Billed before the cancel, so that `_give_back` counts the idle time as spent even when
        the API reports no `spend`."""
        with self._cond:
            idle = {h.rental.rental_id: self._bill(h.rental) for h in helds}
        finals = self._give_back(helds, within_s)
        with self._cond:
            for held in helds:
                final = finals.get(held.rental.rental_id)
                self._idle_usd += idle[held.rental.rental_id]
                if final is not None:
                    self._idle_usd += self._rest(held.rental, final)
        return finals

    def _end_renting(self, reserved_usd: float) -> None:
        """A rental that failed: its reservation goes, and what the orders the provisioner
        cancelled before they served a job cost is spent, and the run's."""
        wasted = self.provisioner.take_wasted_usd()
        with self._cond:
            self._reserved.remove(reserved_usd)
            self.budget.spent_usd += wasted
            self._idle_usd += wasted
            self._cond.notify_all()

    def idle_cost_usd(self) -> float:
        with self._cond:
            return self._idle_usd

    def _wanted(self, held: _Held) -> bool:
        """Could a job still waiting use this server?"""
        return any(_fits(held.rental, j.gpu or _ANY_GPU) for j in self._pending)

    def _find(self, place: Place) -> _Held | None:
        with self._cond:
            return self._held.get(int(place.facts.get("rental_id", "-1")))

    def shutdown(self) -> None:
        """Give back everything held, all orders cancelled first and then confirmed together.
        Idempotent: the driver calls it as soon as a run is cancelled, and again at the end."""
        with self._cond:
            self._closing = True
            for cancel in self._setting_up.values():
                cancel.set()  # each cancels its own order, if it made one
            setting_up = bool(self._setting_up)
            held = list(self._held.values())
            self._held.clear()
            self._rentals_of.clear()
            # Jobs still running or rentals being set up: the run was stopped (a signal, say),
            # and everything must be cancelled within GitHub's grace, so confirming is cut
            # short and the rest left to the cleanup step. A run that ended confirms in full.
            stopped = setting_up or bool(self._reserved) or any(h.job is not None for h in held)
            for h in held:
                if h.job is not None and h.place is not None:
                    # Its worker's release() will find the server gone: settle the attempt's
                    # share now, so the run does not price it again (the rest is idle).
                    h.place.facts["cost_usd"] = f"{self._bill(h.rental):.6f}"
        options = self.provisioner.options
        within_s = options.shutdown_confirm_within_s if stopped else None
        if held:
            self._give_back_idle(held, within_s)
        self._wait_for_setups(within_s if within_s is not None else options.confirm_within_s)
        for worker in self._releasers:
            worker.join(timeout=within_s if within_s is not None else options.confirm_within_s)
        self.provisioner.close_pool()
        self._check_ledger()

    def _check_ledger(self) -> None:
        """Say so when this run leaves a rental it could not confirm released (an ambiguous
        create whose order never showed, a cancel the API did not confirm): it may bill."""
        ledger, run_id = self.provisioner.ledger, self.provisioner.run_id
        try:
            left = ledger.unreleased(run_id)
        except InfrastructureError:
            return
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
            market = _LiveMarket(self, [], unread=f"the marketplace could not be read: {exc}")
        self._live = market
        boot = BootTimes(DEFAULT_BOOT_S, self.provisioner.options.online_timeout_s)
        return ServerBook(
            jobs,
            cap,
            market=market,
            budget_usd=budget_usd if budget_usd is not None else self.budget.limit_usd,
            provisioning=provisioning,
            boot=boot,
            durations_s=durations_s,
            now=self.clock.time(),
        )

    def rent(
        self, cmd: RentServer, job: Job, report: ServerReport, stages: StageSink = NO_STAGES
    ) -> None:
        """Rent the core's choice and say whether it came up (on a thread of the driver)."""
        cancel = threading.Event()
        with self._cond:
            closing = self._closing
            if not closing:
                self._setting_up[cmd.server] = cancel
        if closing:
            report(RentFailed(cmd.server, "the run is shutting down"))
            return
        try:
            event = self._rent_for_core(cmd, job, cancel, stages)
        finally:
            with self._cond:
                self._setting_up.pop(cmd.server, None)
                self._cond.notify_all()
        if isinstance(event, RentFailed) and not event.fatal:
            self._skipped.setdefault(job.id, []).append(event.reason)
        report(event)

    def _rent_for_core(
        self, cmd: RentServer, job: Job, cancel: threading.Event, stages: StageSink
    ) -> ServerEvent:
        assert self._live is not None
        offer = self._live.offer(cmd.quote)
        try:
            self._check_balance(offer, cmd.worst_case_usd)
            hourly = self._hourly(job, offer)
            if hourly > cmd.quote.usd_per_hour * (1 + 1e-6) + 1e-9:
                # The spot book moved since the quote: the budget reserved less than this.
                return RentFailed(
                    cmd.server,
                    f"server {offer.server_id}: the bid it needs now (${hourly:.4f}/h) is "
                    f"over the ${cmd.quote.usd_per_hour:.4f}/h reserved for it",
                )
            stages.stage("renting", _offer_label(offer), hourly)
            rental = self.provisioner.rent(job, offer, cancel, stages)
        except RunMustStop as exc:
            return RentFailed(cmd.server, exc.message, self._wasted_usd(), fatal=True)
        except JobCannotRun as exc:  # a budget pool refused it: no host would do
            return RentFailed(cmd.server, str(exc), self._wasted_usd(), job_cannot_run=True)
        except CloreRunError as exc:  # a host of its own failing (SkipOffer), or cancelled
            self._refresh_market()
            return RentFailed(cmd.server, str(exc), self._wasted_usd())
        with self._cond:
            closing = self._closing
            if not closing:
                self._held[rental.rental_id] = _Held(rental)
                self._rentals_of[cmd.server] = rental.rental_id
        if closing:  # shut down while it was being set up: it ran nothing
            self._give_back_idle([_Held(rental)])
            return RentFailed(cmd.server, "the run is shutting down")
        return ServerReady(cmd.server)

    def _wasted_usd(self) -> float:
        """What orders cancelled before they served a job cost: spent, and the run's."""
        wasted = self.provisioner.take_wasted_usd()
        with self._cond:
            self.budget.spent_usd += wasted
            self._idle_usd += wasted
        return wasted

    def _refresh_market(self) -> None:
        if self._live is None:
            return
        try:
            self._live.update(self._offers())
        except api_errors.CloreApiError:
            return  # the snapshot it has stays: the next failure tries again

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        with self._cond:
            held = self._held.get(self._rentals_of.get(server, -1))
            if held is None or held.rental.lost:
                raise InfrastructureError(f"{job.id}: its server is no longer held")
            if not self.provisioner.cover(held.rental, job):
                raise InfrastructureError(f"{job.id}: the budget pool cannot cover it now")
            held.rental.skipped = self._skipped.pop(job.id, []) + held.rental.skipped
            held.job, held.job_started = job, self.clock.time()
            held.place = self._place(held.rental)
            return held.place

    def attempt_done(self, place: Place) -> None:
        held = self._find(place)
        if held is None:
            return  # given back under it (a shutdown): that settled the attempt's share
        with self._cond:
            held.job = None
            held.rental.won_back = False
            place.facts["cost_usd"] = f"{self._bill(held.rental):.6f}"

    def lost(self, server: int) -> bool:
        with self._cond:
            held = self._held.get(self._rentals_of.get(server, -1))
            return held is None or held.rental.lost

    def release_server(self, server: int, reason: str, report: ServerReport) -> None:
        with self._cond:
            held = self._held.pop(self._rentals_of.pop(server, -1), None)
        if held is None:
            report(ServerReleased(server))
            return
        final = self._give_back_idle([held]).get(held.rental.rental_id)
        report(ServerReleased(server, final))

    def _wait_for_setups(self, within_s: float) -> None:
        """Rentals still being set up cancel their own orders: wait (a while) for them, so
        that the ledger check after this sees them gone."""
        # Real seconds: the rentals' threads run on them, whatever clock the run is on.
        deadline = time.monotonic() + within_s
        with self._cond:
            while self._setting_up and time.monotonic() < deadline:
                self._cond.wait(timeout=0.05)


class _LiveMarket(OfferMarket):
    """The marketplace as the core sees it: the last snapshot fetched, priced as the
    provisioner will rent (a spot order bids over the rivals in its server's book), and every
    offer seen this run kept for fitting (a server we hold is listed as rented)."""

    def __init__(self, backend: CloreBackend, offers: list[Offer], unread: str = "") -> None:
        super().__init__(offers, backend.currency)
        self._backend = backend
        self._seen: dict[str, Offer] = dict(self._by_host)
        self._unread = unread  # why there is no snapshot, if there is none

    def why_none(self, ask: GpuAsk | None, excluded: Set[str]) -> str:
        return self._unread or super().why_none(ask, excluded)

    def update(self, offers: list[Offer]) -> None:
        self._unread = ""
        self._offers = list(offers)
        self._by_host = {str(o.server_id): o for o in self._offers}
        self._seen.update(self._by_host)

    def offer(self, quote: Quote) -> Offer:
        return self._seen[quote.host]

    def fits(self, quote: Quote, ask: GpuAsk | None) -> bool:
        ask = ask or _ANY_GPU
        offer = self._seen.get(quote.host)
        if offer is None or (quote.spot and not ask.spot):
            return False
        # Ours now, so the market shows it rented: that does not make it unfit for our jobs.
        if misses(replace(offer, rented=False), ask):
            return False
        return ask.max_usd_per_hour is None or quote.usd_per_hour <= ask.max_usd_per_hour

    def quote(self, offer: Offer, ask: GpuAsk) -> Quote | None:
        quote = super().quote(offer, ask)
        if quote is None:
            return None
        fee = self._backend.provisioner.creation_fee_usd(offer, ask.spot)
        return replace(quote, creation_fee_usd=fee, fee_rate=offer.fee_rate(ask.spot))

    def usd_per_hour(self, offer: Offer, ask: GpuAsk) -> float | None:
        if not ask.spot:
            return offer.on_demand_usd_per_hour
        rivals = self._backend.provisioner.rival_bids(offer.server_id)
        bid_per_day = spot_bid_per_day(offer, ask.max_usd_per_hour, rivals)
        if bid_per_day is None or offer.usd_per_unit is None:
            return None
        listed = per_hour(bid_per_day) * offer.usd_per_unit
        return money.with_fee_per_hour(listed, offer.spot_fee_rate)


def _offer_label(offer: Offer) -> str:
    """`RTX 4090 #88028`, `2x RTX 4090 #88028`: what the live view says is being rented."""
    gpus = offer.gpu_model if offer.gpu_count == 1 else offer.gpus
    return f"{gpus} #{offer.server_id}"


def _fits(rental: Rental, ask: GpuAsk) -> bool:
    """Could a job asking `ask` run on this rental? Its server must fit, and so must the terms
    it is rented on: the price it pays (a spot bid can be above the spot minimum that `misses`
    checks) and its kind (a spot server can be outbid: it is no server for an on-demand ask)."""
    if misses(rental.offer, ask) or (rental.spot and not ask.spot):
        return False
    return ask.max_usd_per_hour is None or rental.usd_per_hour <= ask.max_usd_per_hour
