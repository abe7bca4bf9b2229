"""`clore-run runner start`: rent N servers and put one just-in-time runner on each.

Renting is a pipeline job's own machinery: each runner is a job of the core's book of servers
(runner/core/servers.py: the best offer by expected cost, the budget's worst case over the boot
bound and `max-minutes`, hedged boots, hosts that failed lately skipped), carried out by the
driver `run` uses (runner/engine/driver.py) on the Clore backend (the ledger row before every
create, a hedge's too; the host history written as hosts boot or fail). What a runner's job
"runs" is the install of the runner over SSH (remote.py). In order:
1. the market is read once: fewer fitting offers than runners, or a budget that cannot cover
   the best ones' worst cases, is refused before anything is registered or rented;
2. every runner is registered (a token that cannot administer runners, or a group GitHub
   refuses, fails before anything is rented);
3. the driver rents a server per runner (a boot that runs late gets a second host beside it:
   the first to answer SSH wins, the other is cancelled at once) and installs the runner;
4. once every runner is installed, each server is handed over: the backend forgets it, so the
   run's end does not give it back (`runner stop` and the reaper do). Anything failed, or a
   signal: nothing is kept, the backend's shutdown gives back every server rented or being
   rented, and every registration is removed before the error leaves.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runner.backends.base import Backend, Place
from runner.backends.runner_host import HandedServer, RunnerHost
from runner.clock import Clock
from runner.core.events import CancelAll, Event, StopCause
from runner.core.known_jobs import WaitReason
from runner.core.model import Attempt, FailureKind, GpuAsk, Job, JobResult, JobStatus, Provisioning
from runner.core.placing import PlacingCore
from runner.core.servers import ServerBook
from runner.engine.attempt import Ran
from runner.engine.driver import Driver, DriverOptions
from runner.engine.server_book import book_for
from runner.errors import CloreRunError, InfrastructureError, JobCannotRun
from runner.gh_runner.github import DEFAULT_GROUP_ID, Registration, RunnerApi
from runner.gh_runner.record import PoolClaim, RunnerRecord, RunnerRental
from runner.gh_runner.remote import RunnerPackage, install_runner

if TYPE_CHECKING:  # psycopg is an extra: only a start that joins a pool imports it
    from runner.stores.pools.seat import PoolSeat

_UNSAFE = re.compile(r"[^a-z0-9-]+")
BARRIER_POLL_S = 0.2  # real seconds between looks at the other runners while one waits


class StartInterrupted(InfrastructureError):
    """A signal stopped `start`; everything it rented was given back."""

    exit_code = 130


@dataclass(frozen=True)
class StartRequest:
    ask: GpuAsk
    max_minutes: float
    run_id: str
    runners: int = 1
    image: str | None = None
    budget_usd: float | None = None
    group_id: int = DEFAULT_GROUP_ID
    package: RunnerPackage = field(default_factory=RunnerPackage)


@dataclass
class StartTools:
    """What start rents and registers with: injected, so tests use fakes and a fake clock."""

    # The backend's renting for runners (runner.backends.runner_host), as the registry names
    # it: the ledger row before every create, hedged boots, the host history.
    host: RunnerHost
    clock: Clock
    github: RunnerApi
    # The budget pool this start joined (`--pool`): every rent reserves its worst case there
    # before its create; the runners' reservations outlive the start, and `stop` settles them.
    seat: PoolSeat | None = None
    # The runner package onto this machine (package.py: fetched once, cached), so it reaches
    # each server over SSH; the default leaves it to the server to download.
    fetch_package: Callable[[RunnerPackage], RunnerPackage] = lambda package: package


Say = Callable[[str], None]


def labels_for(run_id: str, count: int) -> list[str]:
    """Unique labels: the run, the runner's number and a random tail (a re-run never meets a
    runner of an earlier attempt)."""
    tag = _UNSAFE.sub("-", run_id.lower()).strip("-")[:40] or "run"
    tail = secrets.token_hex(6)  # 48 bits: a label cannot be guessed before it is printed
    return [f"clore-{tag}-{i + 1}-{tail}" for i in range(count)]


def start_runners(
    request: StartRequest, tools: StartTools, cancel: threading.Event, say: Say
) -> RunnerRecord:
    """Rent, register and start `request.runners` runners; the record of them all."""
    host = tools.host
    registrations: dict[str, Registration] = {}
    try:
        host.join(tools.seat)
        check = _job("check", request)
        # The offers that fit: fewer than runners is refused before anything is registered.
        host.check_offers(check, request.runners)
        for label in labels_for(request.run_id, request.runners):
            # The unique label only: a label another job could name (`self-hosted`, `linux`,
            # `gpu`) lets a queued stranger's job, a fork's pull request on a public
            # repository, take the rented server (root in its container until the cap).
            registrations[label] = tools.github.generate_jitconfig(label, [label], request.group_id)
            say(f"{label}: registered as runner {registrations[label].runner_id}")
        host.check_budget(check, request.runners, request.budget_usd)
        request = replace(request, package=tools.fetch_package(request.package))
        handed = _rent_and_install(request, tools, registrations, cancel, say)
    except BaseException:
        host.close()  # leaves the pool: a built backend's shutdown closed the rest
        _deregister(registrations, tools, say)  # none yet when the offers were refused
        raise
    return RunnerRecord(
        runners=tuple(
            _rental_of(label, handed[label], registrations[label], request, tools)
            for label in registrations
        ),
        pool=_claim(tools.seat),
    )


def _claim(seat: PoolSeat | None) -> PoolClaim | None:
    """The pool lease the runners' reservations are under, for `stop` to settle them."""
    if seat is None:
        return None
    lease = seat.keeper.lease
    return PoolClaim(name=seat.pool, holder=seat.holder, token=lease.token, ttl_s=lease.ttl_s)


def _job(label: str, request: StartRequest) -> Job:
    return Job(
        id=label,
        name=label,
        run="",
        timeout_s=request.max_minutes * 60.0,
        gpu=request.ask,
        image=request.image,
        workspace=False,
    )


def _rent_and_install(
    request: StartRequest,
    tools: StartTools,
    registrations: dict[str, Registration],
    cancel: threading.Event,
    say: Say,
) -> dict[str, HandedServer]:
    """The runners' jobs, driven as `run` drives a pipeline's; each label's rental, handed
    over, once every runner is installed."""
    if cancel.is_set():
        raise StartInterrupted("interrupted: nothing was rented")
    host = tools.host
    backend = host.backend
    jobs = [_job(label, request) for label in registrations]
    # Twice as many servers as runners: room for a hedge beside every boot.
    book = book_for(
        backend, jobs, 2 * len(jobs), tools.clock.time(), request.budget_usd, Provisioning.ON_DEMAND
    )
    journal = _Journal(say)
    installs = _Installs(host, request, registrations, tools.clock, say)
    driver = Driver(
        PlacingCore(jobs, book),
        backend,
        installs,
        journal,
        tools.clock,
        DriverOptions(must_stop=_must_stop, notice=say),
    )
    journal.failed = lambda reason: driver.cancel(reason, StopCause.INFRASTRUCTURE)
    installs.stuck = lambda: driver.call(lambda _now: _budget_stuck(book)).result(timeout=10.0)
    whole = False
    try:
        _drive(driver, host, jobs, cancel, tools.clock)
    finally:
        whole = not cancel.is_set() and len(installs.handed) == len(jobs)
        if not whole:  # while the pool seat is there to settle their reservations
            host.give_back_handed(say)
        # Its reservations go on with the runners' servers.
        seat = host.keep_seat() if whole else None
        driver.give_back()  # a rental left unconfirmed is said there, with its hint
    if not whole:
        if cancel.is_set():
            raise StartInterrupted("interrupted: every server rented was given back")
        raise _failure(journal.results)
    if seat is not None:
        # Not `leave`: that would hand the reservations to a reaper at once. The lease lasts
        # its ttl (the runners' cap and the reaper's grace): `stop` settles and ends it, or a
        # pool reaper does once it has run out.
        seat.keeper.stop()
        seat.pools.close()
    return installs.handed


def _drive(
    driver: Driver,
    host: RunnerHost,
    jobs: list[Job],
    cancel: threading.Event,
    clock: Clock,
) -> None:
    """Until every runner's job is over, whatever happens (a signal sets `cancel`: a handler
    can set an event but not stop the loop, so a watcher posts the cancel to it)."""
    over = threading.Event()

    def watch() -> None:
        while not over.is_set():
            if cancel.wait(0.1):
                host.stop_soon()
                driver.cancel("interrupted", StopCause.INTERRUPTED)
                return

    watcher = threading.Thread(target=watch, name="runner-signals", daemon=True)
    watcher.start()
    try:
        driver.add(jobs, {}, clock.time())
        driver.run_until_idle()
    finally:
        over.set()
        driver.finish_work()
        watcher.join()


def _must_stop(reason: str, _now: float) -> Event:
    """A rent no rent could pass (a refused key, no balance): every runner stops."""
    return CancelAll(reason, StopCause.INFRASTRUCTURE)


def _budget_stuck(book: ServerBook) -> str:
    """A runner that waits for money the others' servers hold: they live on past this start
    (its run never ends to free it), so it never gets a server."""
    for job_id in book.waiting():
        if book.wait_reason(job_id) is WaitReason.BUDGET:
            return (
                f"no offer left within the budget for {job_id} beside the other runners' "
                "servers (a host failed, and the next fitting one costs more)"
            )
    return ""


def _failure(results: list[JobResult]) -> CloreRunError:
    """The first runner that failed, in words (the others were stopped for it)."""
    failed = [r for r in results if r.status is not JobStatus.CANCELLED] or results
    if not failed:
        return JobCannotRun("no runner was started")
    result = failed[0]
    last = result.attempts[-1].message if result.attempts else ""
    return JobCannotRun(f"{result.job_id}: {result.reason or last or result.status.value}")


def _deregister(registrations: dict[str, Registration], tools: StartTools, say: Say) -> None:
    """Remove every registration this start made (on any error, and on a signal)."""
    for label, registration in registrations.items():
        try:
            tools.github.delete_runner(registration.runner_id)
        except InfrastructureError as exc:
            say(f"{label}: could not remove runner {registration.runner_id}: {exc}")


class _Journal:
    """What the driver reports of the runners' jobs: said, kept, and a failure stops them all
    (a start is whole or nothing)."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.results: list[JobResult] = []
        self.failed: Callable[[str], None] = lambda _reason: None

    def batch(self) -> nullcontext[None]:
        return nullcontext()

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        return None

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        hedge = place.facts.get("hedge")
        self.say(f"{job.id}: on {place.name}" + (f" ({hedge})" if hedge else ""))

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        if attempt.failure is not None and attempt.message:
            self.say(f"{job.id}: {attempt.message}")

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        self.say(f"{job.id}: trying another server")

    def waits_until(self, job: Job, at: float) -> None:
        return None

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.results.append(result)
        if result.status is not JobStatus.PASSED:
            self.failed(f"{job.id}: {result.reason or result.status.value}")


class _Installs:
    """Each runner job's attempt: install the runner on the server the core chose, then wait
    for the others; once all are installed, hand the server over (the driver's end gives back
    only what was not). Never raises (the driver's contract)."""

    def __init__(
        self,
        host: RunnerHost,
        request: StartRequest,
        registrations: dict[str, Registration],
        clock: Clock,
        say: Say,
    ) -> None:
        self.host = host
        self.backend: Backend = host.backend
        self.request = request
        self.registrations = registrations
        self.clock = clock
        self.say = say
        self.handed: dict[str, HandedServer] = {}
        self.stuck: Callable[[], str] = lambda: ""
        self._installed: set[str] = set()
        self._lock = threading.Lock()
        self._all_in = threading.Event()

    def run(
        self,
        job: Job,
        number: int,
        server: int,
        timeout_s: float,
        kill: threading.Event,
        placed: Callable[[Place], None],
    ) -> Ran:
        began = self.clock.time()
        place: Place | None = None
        try:
            place = self.backend.place(server, job, kill)
            placed(place)
            self._install(job, place)
            failure, message = self._wait_for_all(job, kill)
            if failure is None:
                self._hand_over(job, place, server)
        except CloreRunError as exc:
            failure, message = FailureKind.UNAVAILABLE, str(exc)
        except Exception as exc:  # a bug must not hang the start
            failure, message = FailureKind.PROVISIONING_FAILED, f"internal: {exc!r}"
        if place is not None and job.id not in self.handed:
            self.backend.attempt_done(place)  # idle again: the driver's end gives it back
        name = place.name if place is not None else ""
        code = 0 if failure is None else None
        return Ran(Attempt(number, began, self.clock.time(), code, failure, message, name))

    def _hand_over(self, job: Job, place: Place, server: int) -> None:
        self.handed[job.id] = self.host.hand_over(place, server, job)

    def _install(self, job: Job, place: Place) -> None:
        held = self.host.held(place)
        limit_s = held.held_since + self.request.max_minutes * 60.0 - self.clock.time()
        config = self.registrations[job.id].jit_config
        said = install_runner(held.conn, job.id, config, self.request.package, limit_s)
        self.say(f"{job.id}: {said}")
        with self._lock:
            self._installed.add(job.id)
            if len(self._installed) == len(self.registrations):
                self._all_in.set()

    def _wait_for_all(self, job: Job, kill: threading.Event) -> tuple[FailureKind | None, str]:
        """Until every runner is installed (a server handed over early would leave the core's
        budget, and a runner still renting could spend its money), a kill (another failed, or
        a signal), or a runner that can never get a server."""
        while not self._all_in.wait(BARRIER_POLL_S):
            if kill.is_set():
                return FailureKind.CANCELLED, "stopped: another runner failed, or a signal"
            stuck = self.stuck()
            if stuck:
                return FailureKind.UNAVAILABLE, stuck
        return None, ""


def _rental_of(
    label: str,
    handed: HandedServer,
    registration: Registration,
    request: StartRequest,
    tools: StartTools,
) -> RunnerRental:
    return RunnerRental(
        label=label,
        runner_id=registration.runner_id,
        scope=tools.github.scope.path,
        order_id=handed.order_id,
        server_id=handed.server_id,
        created_unix=int(handed.held_since),
        cap_unix=handed.held_since + request.max_minutes * 60.0,
        run_id=request.run_id,
        currency=handed.currency,
        spot=handed.spot,
        usd_per_unit=handed.usd_per_unit,
        fee_rate=handed.fee_rate,
        creation_fee_native=handed.creation_fee_native,
        usd_per_hour=handed.usd_per_hour,
        gpus=handed.gpus,
        reservation_id=handed.reservation_id,
    )
