"""One `serve` instance among N on one PostgreSQL queue: its lease, its claims, its take-overs.

A thread of its own, beside the scheduling loop, does in turn:
- heartbeat the instance's lease every ttl/3. Refused (it expired, or another instance took it)
  means this instance no longer owns its jobs: `on_lost` ends the server, whose hand-over kills
  what runs (the writes it then makes are fenced, so they land only if nobody took them yet);
- take instances whose lease expired (one taker each, SKIP LOCKED) and recover them as a
  restart recovers the last server: reconcile the backend (local orphans killed, rentals
  cancelled per the ledger), then record each running attempt `server_lost` and let the retry
  table requeue the job in this instance's core;
- pass on cancel requests other instances took for jobs this one holds;
- claim runnable jobs up to the free room in its core (SKIP LOCKED: instances never wait on
  each other's claims, nor take the same job), with a budget pool no more than it has server
  slots for, each claimed with its slot in one transaction; and add them to the core.
It sleeps until the next beat or `poll_s`, or until woken: by a NOTIFY (a submission or a
settlement somewhere), or by its own core settling a job (room for the next one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from runner.core.model import Attempt, Job, JobResult
from runner.errors import InfrastructureError
from runner.serve.views import iso
from runner.stores.queue import OpenAttempt, SharedQueueStore, Unsettled

if TYPE_CHECKING:
    from runner.backends.base import Place

log = logging.getLogger("clore_run.serve")


@dataclass(frozen=True)
class FleetOptions:
    ttl_s: float = 30.0  # a dead instance's jobs wait this long (at most) for another one
    poll_s: float = 1.0  # claims are looked for at least this often, NOTIFY or not


class FencedJournal:
    """The queue's journal for a shared store: every write names this instance as the owner,
    so a write after another instance took the job is refused (JobTakenOver), never applied."""

    def __init__(self, store: SharedQueueStore, instance: str, settled: Callable[[], None]):
        self.store = store
        self.instance = instance
        self._settled = settled

    def batch(self) -> AbstractContextManager[None]:
        return self.store.batch()

    def attempt_started(self, job: Job, number: int, now: float) -> None:
        self.store.fenced_start_attempt(job.id, number, self.instance, now)
        log.info("job %s started (attempt %d)", job.id, number)

    def attempt_placed(self, job: Job, number: int, place: Place, now: float) -> None:
        self.store.place_attempt(job.id, number, place.name, place.facts, place.usd_per_hour)

    def attempt_ended(self, job: Job, attempt: Attempt) -> None:
        self.store.fenced_end_attempt(job.id, attempt, self.instance)

    def requeued(self, job: Job, at: float, retries_used: int, infra_used: int) -> None:
        self.store.fenced_requeue(job.id, at, retries_used, infra_used, self.instance)

    def waits_until(self, job: Job, at: float) -> None:
        return None

    def settled(self, job: Job, result: JobResult, now: float) -> None:
        self.store.fenced_settle(result, now, self.instance)
        log.info("job %s %s %s", job.id, result.status.value, result.reason)
        self._settled()


class Fleet:
    """The instance's thread of lease, take-overs and claims. `hooks` are the service's."""

    def __init__(
        self,
        store: SharedQueueStore,
        instance: str,
        hooks: FleetHooks,
        options: FleetOptions,
        on_lost: Callable[[str], None],
    ) -> None:
        self.store = store
        self.instance = instance
        self.hooks = hooks
        self.options = options
        self.on_lost = on_lost
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-fleet", daemon=True)
        # The lease is renewed on a thread of its own: a take-over's recovery or a slow claim
        # on the work thread must not let this instance's own lease run out (an expired lease
        # cannot be renewed, so the instance would end itself while it was only busy).
        self._beater = threading.Thread(target=self._keep_lease, name="serve-lease", daemon=True)
        self._listener = Listener(store, self._wake, options.poll_s)
        self.lost = False

    def start(self) -> None:
        self._beater.start()
        self._thread.start()
        self._listener.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._listener.stop()
        for thread in (self._thread, self._beater):
            if thread.is_alive():
                thread.join(timeout=30)

    def nudge(self) -> None:
        self._wake.set()

    def _keep_lease(self) -> None:
        good_beat = time.monotonic()
        while not self._stop.is_set() and not self.lost:
            good_beat = self._beat(good_beat)
            if self.lost:
                self._wake.set()  # the work thread stops too
                return
            self._stop.wait(self.options.ttl_s / 3)

    def _run(self) -> None:
        next_sweep = 0.0
        while not self._stop.is_set() and not self.lost:
            now = time.monotonic()
            # Take-overs and cancel requests on the poll's clock; a wake-up (a NOTIFY from
            # every settlement anywhere, or a slot freed here) only claims.
            steps = [self._claim]
            if now >= next_sweep:
                next_sweep = now + self.options.poll_s
                steps = [self._take_over, self._pass_cancels, self._claim]
            for step in steps:
                if self._stop.is_set() or self.lost:
                    return
                try:
                    step()
                except InfrastructureError as exc:  # the database: the next round tries again
                    log.warning("clore-run serve: %s", exc)
                except Exception:  # the loop did not answer, or a bug: this thread goes on
                    log.exception("clore-run serve: lease and claims thread error")
            wait_s = next_sweep - time.monotonic()
            self._wake.wait(max(0.0, wait_s))
            self._wake.clear()

    def _beat(self, good_beat: float) -> float:
        try:
            if self.store.heartbeat(self.instance, self.options.ttl_s):
                return time.monotonic()
            self._lose("its lease was taken by another server (it expired)")
        except InfrastructureError as exc:
            log.warning("clore-run serve: cannot renew the lease: %s", exc)
            if time.monotonic() - good_beat > self.options.ttl_s:
                self._lose(f"its lease could not be renewed for {self.options.ttl_s:g} s")
        return good_beat

    def _lose(self, why: str) -> None:
        self.lost = True
        log.error("clore-run serve: instance %s stops: %s", self.instance, why)
        self.on_lost(why)

    def _take_over(self) -> None:
        for taken in self.store.take_dead(self.instance):
            log.warning(
                "server %s is gone (lease expired): taking its %d running job(s)",
                taken.token,
                len(taken.running),
            )
            for job_id in taken.cancelled:
                log.warning(
                    "job %s: cancelled by request (its server %s is gone)", job_id, taken.token
                )
            # Always reconciled: an instance with no job running may still have held rentals
            # (kept warm, or rented for warmth), which are cancelled, never adopted.
            self.hooks.recover(taken.token, taken.running, taken.open_attempts)

    def _pass_cancels(self) -> None:
        for job_id in self.store.cancel_requests(self.instance):
            self.hooks.cancel_held(job_id)

    def _claim(self) -> None:
        room = self.hooks.room()  # the pool's room, if any, is counted in the claim itself
        if room <= 0:
            return
        claimed = self.store.claim(self.instance, room, self.hooks.now())
        if claimed:
            self.hooks.add_claimed(claimed)


class FleetHooks(Protocol):
    """What the fleet thread asks of the service (each runs on the scheduling loop)."""

    def room(self) -> int: ...

    def now(self) -> float: ...

    def add_claimed(self, claimed: list[Unsettled]) -> None: ...

    def recover(
        self, token: str, running: list[Unsettled], open_attempts: dict[str, OpenAttempt]
    ) -> None: ...

    def cancel_held(self, job_id: str) -> None: ...


class Listener:
    """LISTEN on the queue's channel in a connection of its own; each notification wakes the
    fleet. Only a hint: lost (connection down, server restarted), the poll still finds work."""

    def __init__(self, store: SharedQueueStore, wake: threading.Event, poll_s: float) -> None:
        self.url = store.url
        self.wake = wake
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.poll_s + 10)

    def _run(self) -> None:
        import psycopg  # the PostgreSQL extra: only serve on a shared queue listens

        from runner.stores.pg import with_password
        from runner.stores.queue.pg_base import CHANNEL

        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    with_password(self.url), autocommit=True, connect_timeout=5
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=self.poll_s, stop_after=1):
                            self.wake.set()
            except psycopg.Error:
                self._stop.wait(self.poll_s)  # the poll goes on meanwhile


def log_elsewhere(store: SharedQueueStore, instance: str, job_id: str) -> str | None:
    """Where a job's log is when this instance has none of it: with the instance that holds
    the job (or ran its last attempt). None: nobody ran it yet, or it is this one's."""
    where = store.whereabouts(job_id)
    if where.owner is None or where.owner == instance:
        return None
    at = f" at {where.url}" if where.url else ""
    tail = "" if where.alive else " (that server has stopped: its log stays on its host)"
    fetch = f": GET {where.url}/jobs/{job_id}/log" if where.url and where.alive else ""
    return f"job {job_id} runs on server {where.owner}{at}; its log is there{fetch}{tail}"


def waiting_elsewhere(store: SharedQueueStore, job_id: str, now: float) -> str | None:
    """Why a queued job that this instance's core does not hold has not started, from its
    row: its retry time, its not-before, a need not settled, or no instance has room yet."""
    found = store.job(job_id)
    if found is None:
        return None
    row, spec = found
    if row.retry_at is not None and row.retry_at > now:
        return f"a retry at {iso(row.retry_at)}"
    not_before = spec.get("not_before")
    if isinstance(not_before, (int, float)) and not_before > now:
        return f"not before {iso(float(not_before))}"
    for need in spec.get("needs", []):
        need_row = store.job(str(need))
        if need_row is not None and need_row[0].status in ("queued", "running"):
            return f"needs '{need}' ({need_row[0].status})"
    held = store.whereabouts(job_id).owner
    if held is not None:
        return f"a free slot on server {held}, which holds it"
    return "a free slot on any server"
