"""A pool holder in a process of its own, for the multi-process pool tests and the benchmark.

    python -m tests.stores.pools.pool_worker contend URL POOL HOLDER RENTALS CLORE_URL SERVER
        FAKE_UNIX [--no-lock] [--amount USD]
    python -m tests.stores.pools.pool_worker hold URL POOL HOLDER CLORE_URL FAKE_UNIX TTL SERVER...
        [--crash-after-create]
    python -m tests.stores.pools.pool_worker cycle URL POOL HOLDER CYCLES

Both print `ready` and wait for a line on stdin before they start, so that a test releases
every process at once. `contend` rents and gives back RENTALS servers through the pool, waiting
whenever the pool is full, and prints one JSON line of reservation latencies. `hold` rents one
server per SERVER, prints `holding`, then heartbeats and answers commands on stdin (`reserve`,
`settle`, `status`), one JSON line each; `--crash-after-create` dies right after the first
create, before the order id is written (the crash a reaper must recover from).

The Clore client runs on FAKE_UNIX (the fake's clock) and does not pace itself: the fake's rate
limits are off in these tests, and nothing here waits real seconds on purpose.
"""

from __future__ import annotations

import json
import os
import sys
import time

from runner.backends.clore.api import CloreClient, OrderRequest
from runner.backends.clore.ownership import LedgerMarks
from runner.backends.clore.ratelimit import RateLimiter
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools import Lease, LeaseLost, Refusal, Reservation
from runner.stores.pools.lease_keeper import LeaseKeeper
from runner.stores.pools.postgres import PostgresPools

CURRENCY = "CLORE-Blockchain"
API_KEY = "fake-key-5f0c2e9a7b31d4e8"  # tests/fakes/clore_api.py's


class FrozenClock:
    """The fake API's time (it does not move for these processes), and no waiting."""

    def __init__(self, unix: float) -> None:
        self.unix = unix

    def now(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return self.unix

    def sleep(self, seconds: float) -> None:
        pass


def client(url: str, fake_unix: float) -> CloreClient:
    limiter = RateLimiter(FrozenClock(fake_unix), min_interval_s=0, create_interval_s=0)
    return CloreClient(API_KEY, base_url=url, limiter=limiter, recover_delays_s=(0, 0, 0))


def reserve_waiting(
    pools: PostgresPools, lease: Lease, amount: float, label: str, latencies: list[float]
) -> Reservation:
    pause = 0.001
    while True:
        began = time.perf_counter()
        made = pools.reserve(lease, amount, label)
        latencies.append(time.perf_counter() - began)
        if isinstance(made, Reservation):
            return made
        assert isinstance(made, Refusal) and not made.ever, made
        time.sleep(pause)  # a contender waiting for a slot, as a run does
        pause = min(pause * 2, 0.02)


def rent(
    api: CloreClient, ledger: PostgresLedger, pools: PostgresPools, lease: Lease, server: int,
    reservation: Reservation, *, crash_after_create: bool = False,
) -> tuple[int, int]:  # fmt: skip
    """Ledger intent, tie the reservation to it, create; (rental id, order id)."""
    rental_id = ledger.record_intent(
        lease.holder, f"job-{server}", server, 1000.0, CURRENCY, 0.1, image="img", spot=False
    )
    pools.attach(lease, reservation.id, rental_id)
    request = OrderRequest(server_id=server, image="img", currency=CURRENCY)
    order = api.create_order(request, journal=LedgerMarks(ledger, rental_id))
    if crash_after_create:
        os._exit(9)
    ledger.set_order(rental_id, order.id)
    ledger.set_state(rental_id, "running")
    return rental_id, order.id


def contend(argv: list[str]) -> None:
    url, pool, holder, rentals, clore_url, server, fake_unix = argv[:7]
    amount = float(argv[argv.index("--amount") + 1]) if "--amount" in argv else 2.5
    pools = PostgresPools(url, lock_pool_row="--no-lock" not in argv)
    ledger = PostgresLedger(url, clock=FrozenClock(float(fake_unix)))
    api = client(clore_url, float(fake_unix))
    lease = pools.join(pool, holder, 600)
    latencies: list[float] = []
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.perf_counter()
    for n in range(int(rentals)):
        reservation = reserve_waiting(pools, lease, amount, f"{holder}/{n}", latencies)
        rental_id, order_id = rent(api, ledger, pools, lease, int(server), reservation)
        api.cancel_order(order_id)
        ledger.set_state(rental_id, "released")
        pools.settle(lease, reservation.id, 0.05)
    pools.leave(lease)
    elapsed = time.perf_counter() - began
    reconnects = pools.db.reconnects + ledger.db.reconnects
    result = {"latencies": latencies, "elapsed": elapsed, "reconnects": reconnects}
    print(json.dumps(result), flush=True)


def cycle(argv: list[str]) -> None:
    """Reserve and settle CYCLES times, no API in between: the pool's own cost under load."""
    url, pool, holder, cycles = argv[:4]
    pools = PostgresPools(url)
    lease = pools.join(pool, holder, 600)
    latencies: list[float] = []
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.perf_counter()
    for n in range(int(cycles)):
        reservation = reserve_waiting(pools, lease, 0.01, f"{holder}/{n}", latencies)
        pools.settle(lease, reservation.id, 0.0)
    pools.leave(lease)
    print(json.dumps({"latencies": latencies, "elapsed": time.perf_counter() - began}))


def hold(argv: list[str]) -> None:
    url, pool, holder, clore_url, fake_unix, ttl = argv[:6]
    servers = [int(s) for s in argv[6:] if not s.startswith("--")]
    pools = PostgresPools(url)
    ledger = PostgresLedger(url, clock=FrozenClock(float(fake_unix)))
    api = client(clore_url, float(fake_unix))
    lease = pools.join(pool, holder, float(ttl))
    keeper = LeaseKeeper(
        pools, lease, on_lost=lambda why: print(json.dumps({"lost": why}), flush=True)
    )
    print("ready", flush=True)
    sys.stdin.readline()
    keeper.start()
    held: list[Reservation] = []
    for server in servers:
        reservation = reserve_waiting(pools, lease, 1.0, f"server {server}", [])
        held.append(reservation)
        rent(
            api, ledger, pools, lease, server, reservation,
            crash_after_create="--crash-after-create" in argv,
        )  # fmt: skip
    print("holding", flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(line.strip(), pools, lease, keeper, held)), flush=True)


def answer(
    command: str, pools: PostgresPools, lease: Lease, keeper: LeaseKeeper, held: list[Reservation]
) -> dict[str, object]:
    try:
        if command == "reserve":
            made = pools.reserve(lease, 0.5, "one more")
            return {"reserve": isinstance(made, Reservation)}
        if command == "settle":
            return {"settle": pools.settle(lease, held[0].id, 0.0)}
        if command == "heartbeat":
            return {"heartbeat": pools.heartbeat(lease)}
        return {"lost": keeper.lost.is_set()}
    except LeaseLost as exc:
        return {"refused": command, "why": exc.message}


if __name__ == "__main__":
    {"contend": contend, "hold": hold, "cycle": cycle}[sys.argv[1]](sys.argv[2:])
