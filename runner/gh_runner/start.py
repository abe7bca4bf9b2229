"""`clore-run runner start`: rent N servers and put one just-in-time runner on each.

Renting is the pipeline's own path (the Provisioner: the ledger row before the create, max price
with the renter's fee, spot or on-demand, SSH with this start's own key); what is new here is
only what comes after the server answers SSH. In order:
1. the market is read once; each runner takes the best fitting offer no other runner of this
   start has taken; the budget must cover every runner's worst case (the boot bound plus
   `max-minutes` at the price with fee, plus the creation fee), reserved before its create;
2. per runner, in parallel: register the JIT runner first (a token that cannot administer
   runners, or a group GitHub refuses, fails before anything is rented), rent (a host that
   fails is skipped for the next offer), install and start it over SSH (remote.py);
3. the connection is closed: the runner lives on with the server;
4. all started: the record (record.py) and the labels. Anything failed, or a signal: every
   server rented so far is given back and every registration removed before the error leaves.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from runner.backends.clore.api import CloreClient
from runner.backends.clore.market import (
    Offer,
    describe_ask,
    explain_no_fit,
    matching_offers,
    offers_from_servers,
)
from runner.backends.clore.provision import (
    ProvisionCancelled,
    Provisioner,
    ProvisionOptions,
    Rental,
    SkipOffer,
)
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock
from runner.core import money
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk, Job
from runner.errors import InfrastructureError, JobCannotRun
from runner.gh_runner.github import DEFAULT_GROUP_ID, Registration, RunnerApi
from runner.gh_runner.record import RunnerRecord, RunnerRental
from runner.gh_runner.remote import RunnerPackage, install_runner
from runner.stores.ledger import RentalLedger

MAX_HOSTS_TRIED = 5  # per runner: hosts that fail to boot are skipped, up to this many
BASE_LABELS = ("self-hosted", "linux", "x64", "clore")
_UNSAFE = re.compile(r"[^a-z0-9-]+")


class StartInterrupted(InfrastructureError):
    """A signal stopped `start`; everything it rented was given back."""

    exit_code = 130


_CANCELLED = (StartInterrupted, ProvisionCancelled)  # a worker's answer to the cancel


@dataclass(frozen=True)
class StartRequest:
    ask: GpuAsk
    max_minutes: float
    run_id: str
    runners: int = 1
    image: str | None = None
    budget_usd: float | None = None
    extra_labels: tuple[str, ...] = ()
    group_id: int = DEFAULT_GROUP_ID
    package: RunnerPackage = field(default_factory=RunnerPackage)


@dataclass
class StartTools:
    """What start rents and registers with: injected, so tests use fakes and a fake clock."""

    client: CloreClient
    clock: Clock
    ledger: RentalLedger
    key: ClientKey
    host_keys: HostKeyStore
    github: RunnerApi
    currency: str
    options: ProvisionOptions = field(default_factory=ProvisionOptions)
    # What past runs saw of each host (hosts.db beside the ledger): hosts that failed lately
    # are skipped, the rest ranked by expected cost. None: by price and reliability alone.
    memory: HostMemory | None = None


Say = Callable[[str], None]


@dataclass
class _Started:
    label: str
    rental: Rental | None = None
    registration: Registration | None = None


class _Shared:
    """What the runners of one start share: the offers taken and the budget reserved."""

    def __init__(self, budget_usd: float | None) -> None:
        self.lock = threading.Lock()
        self.taken: set[int] = set()
        self.budget_usd = budget_usd
        self.reserved_usd = 0.0

    def claim(
        self, offers: list[Offer], tried: set[int], worst: Callable[[Offer], float]
    ) -> tuple[Offer, float] | None:
        """The best offer nobody took whose worst case still fits the budget, reserved."""
        with self.lock:
            for offer in offers:
                if offer.server_id in self.taken or offer.server_id in tried:
                    continue
                worst_usd = worst(offer)
                if self.budget_usd is not None and self.reserved_usd + worst_usd > self.budget_usd:
                    continue
                self.taken.add(offer.server_id)
                self.reserved_usd += worst_usd
                return offer, worst_usd
            return None

    def give_back(self, offer: Offer, worst_usd: float) -> None:
        with self.lock:
            self.reserved_usd -= worst_usd


def labels_for(run_id: str, count: int) -> list[str]:
    """Unique labels: the run, the runner's number and a random tail (a re-run never meets a
    runner of an earlier attempt)."""
    tag = _UNSAFE.sub("-", run_id.lower()).strip("-")[:40] or "run"
    tail = secrets.token_hex(3)
    return [f"clore-{tag}-{i + 1}-{tail}" for i in range(count)]


def start_runners(
    request: StartRequest, tools: StartTools, cancel: threading.Event, say: Say
) -> RunnerRecord:
    """Rent, register and start `request.runners` runners; the record of them all."""
    provisioner = Provisioner(
        client=tools.client,
        ledger=tools.ledger,
        run_id=request.run_id,
        key=tools.key,
        host_keys=tools.host_keys,
        clock=tools.clock,
        currency=tools.currency,
        options=tools.options,
    )
    offers = _ranked_offers(provisioner, tools, request)
    shared = _Shared(request.budget_usd)
    started = [_Started(label) for label in labels_for(request.run_id, request.runners)]
    with ThreadPoolExecutor(max_workers=request.runners, thread_name_prefix="runner") as pool:
        futures: list[Future[None]] = [
            pool.submit(_start_one, s, request, tools, provisioner, offers, shared, cancel, say)
            for s in started
        ]
        failed = _wait_for_all(futures, cancel)
        if failed is not None or cancel.is_set():
            cancel.set()  # the others stop renting; then all of it is given back
            _abort_installs(started)
            wait(futures)
    if failed is not None or cancel.is_set():
        _undo(started, provisioner, tools, say)
        if failed is not None and not isinstance(failed, _CANCELLED):
            raise failed
        raise StartInterrupted("interrupted: every server rented was given back")
    return RunnerRecord(runners=tuple(_rental_of(s, request, tools) for s in started))


def _wait_for_all(futures: list[Future[None]], cancel: threading.Event) -> BaseException | None:
    """Until every runner is started, one failed (its error), or a signal set `cancel`. The
    wait wakes every second to look at `cancel`: a signal handler can set an event but cannot
    end another wait, and an install (a download over SSH) may take minutes."""
    while not cancel.is_set():
        done, pending = wait(futures, timeout=1.0, return_when=FIRST_EXCEPTION)
        failed = next((f.exception() for f in done if f.exception() is not None), None)
        if failed is not None or not pending:
            return failed
    return None


def _abort_installs(started: list[_Started]) -> None:
    """Close the connections of installs under way: their `conn.run` ends at once (the
    servers are given back next, which stops what the installer left running there)."""
    for s in started:
        conn = s.rental.conn if s.rental is not None else None
        if conn is not None:
            conn.close()


def _ranked_offers(
    provisioner: Provisioner, tools: StartTools, request: StartRequest
) -> list[Offer]:
    servers = tools.client.marketplace().servers
    rates = provisioner.fees().rates
    offers = offers_from_servers(servers, tools.currency, fees=rates)
    ranked = matching_offers(offers, request.ask, memory=tools.memory)
    if len(ranked) < request.runners:
        why = (
            explain_no_fit(offers, request.ask, tools.currency)
            if not ranked
            else (
                f"{len(ranked)} servers fit {describe_ask(request.ask, tools.currency)}, "
                f"{request.runners} runners were asked for"
            )
        )
        raise JobCannotRun(why, "widen the ask (gpu, max-price, spot) or ask for fewer runners")
    return ranked


def _job(label: str, request: StartRequest) -> Job:
    return Job(
        id=label,
        name=label,
        run="",
        timeout_s=request.max_minutes * 60.0,
        gpu=request.ask,
        image=request.image,
    )


def _start_one(
    started: _Started,
    request: StartRequest,
    tools: StartTools,
    provisioner: Provisioner,
    offers: list[Offer],
    shared: _Shared,
    cancel: threading.Event,
    say: Say,
) -> None:
    # Registered first: a token or group GitHub refuses fails before anything is rented.
    labels = [*BASE_LABELS, *request.extra_labels, started.label]
    started.registration = tools.github.generate_jitconfig(started.label, labels, request.group_id)
    say(f"{started.label}: registered as runner {started.registration.runner_id}")
    job = _job(started.label, request)
    started.rental = _rent(job, provisioner, offers, shared, cancel, say)
    rental = started.rental
    if cancel.is_set():
        raise StartInterrupted("interrupted")
    limit_s = rental.held_since + request.max_minutes * 60.0 - tools.clock.time()
    assert rental.conn is not None  # rent() returns a connected rental
    said = install_runner(
        rental.conn, started.label, started.registration.jit_config, request.package, limit_s
    )
    rental.conn.close()
    rental.conn = None
    say(f"{started.label}: {said}")


def _rent(
    job: Job,
    provisioner: Provisioner,
    offers: list[Offer],
    shared: _Shared,
    cancel: threading.Event,
    say: Say,
) -> Rental:
    tried: set[int] = set()
    skipped: list[str] = []
    while len(tried) < MAX_HOSTS_TRIED and not cancel.is_set():
        claimed = shared.claim(offers, tried, lambda o: provisioner.worst_case_usd(job, o))
        if claimed is None:
            break
        offer, worst_usd = claimed
        tried.add(offer.server_id)
        price = offer.usd_per_hour(job.gpu is not None and job.gpu.spot) or 0.0
        say(
            f"{job.id}: renting #{offer.server_id} {offer.gpus} at {price:.3f} $/h "
            f"(renter fee included; worst case {money.usd_text(worst_usd)})"
        )
        try:
            rental = provisioner.rent(job, offer, cancel)
        except SkipOffer as exc:
            shared.give_back(offer, worst_usd)
            skipped.append(exc.message)
            say(f"{job.id}: skipped: {exc.message}")
            continue
        say(
            f"{job.id}: order {rental.order_id} up, SSH ready after "
            f"{rental.facts.get('ssh_ready_after_s', '?')} s"
        )
        return rental
    if cancel.is_set():
        raise StartInterrupted("interrupted while renting")
    reason = "; ".join(skipped) or "no offer left within the budget"
    raise JobCannotRun(f"{job.id}: no server could be rented ({reason})")


def _undo(started: list[_Started], provisioner: Provisioner, tools: StartTools, say: Say) -> None:
    """Give back every server and remove every registration this start made."""
    rentals = [s.rental for s in started if s.rental is not None]
    if rentals:
        within_s = tools.options.shutdown_confirm_within_s
        provisioner.release_all(rentals, within_s=within_s)
        for rental in rentals:
            say(f"{rental.job_id}: order {rental.order_id} cancelled")
    for s in started:
        if s.registration is None:
            continue
        try:
            tools.github.delete_runner(s.registration.runner_id)
        except InfrastructureError as exc:
            say(f"{s.label}: could not remove runner {s.registration.runner_id}: {exc}")


def _rental_of(started: _Started, request: StartRequest, tools: StartTools) -> RunnerRental:
    rental, registration = started.rental, started.registration
    assert rental is not None and registration is not None and rental.order_id is not None
    return RunnerRental(
        label=started.label,
        runner_id=registration.runner_id,
        scope=tools.github.scope.path,
        order_id=rental.order_id,
        server_id=rental.offer.server_id,
        created_unix=int(rental.held_since),
        cap_unix=rental.held_since + request.max_minutes * 60.0,
        run_id=request.run_id,
        currency=rental.currency,
        spot=rental.spot,
        usd_per_unit=rental.usd_per_unit,
        fee_rate=rental.fee_rate,
        creation_fee_native=rental.creation_fee_native,
        usd_per_hour=rental.usd_per_hour,
        gpus=rental.offer.gpus,
    )
