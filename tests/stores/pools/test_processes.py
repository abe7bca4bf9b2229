"""Pools under real concurrency: many processes on one PostgreSQL pool and the fake Clore.

The committed amount and the servers held are replayed from `pool_events`, which is numbered
under the pool row's lock, so the replay sees the order in which the changes committed. The same
run without the lock must show an overrun: that proves the replay can see the bug it guards
against."""

from __future__ import annotations

import copy
import json
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.clore.reaper import reap
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools import PoolEvent
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_api import FakeClore
from tests.fakes.fake_clock import START_UNIX
from tests.pg_fixture import PgCluster
from tests.processes import marked_env
from tests.stores.pg_helpers import at

ROOT = Path(__file__).resolve().parents[3]
BUDGET, CAP = 10.0, 4
FIRST_SERVER = 5000
LATER = "2030-01-01T00:00:00Z"  # a reaper's database clock, far past every lease


class Worker:
    """One `tests.stores.pools.pool_worker` process and the lines it prints."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stores.pools.pool_worker", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=marked_env(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("<eof>")

    def expect(self, text: str | None = None, timeout: float = 300) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from worker within {timeout} s") from None
        if line == "<eof>":
            assert self.proc.stderr is not None
            raise AssertionError(f"worker ended: {self.proc.stderr.read()[-3000:]}")
        if text is not None:
            assert line == text
        return line

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def market(fake_clore: FakeClore) -> FakeClore:
    """The fake Clore with many like servers, no pacing, and money enough for every order."""
    fake_clore.enforce_rate_limits = False
    fake_clore.appear_after_s = 0.0
    fake_clore.balances["CLORE-Blockchain"] = 1e12
    template = fake_clore.servers[99173]
    for n in range(40):
        fake_clore.servers[FIRST_SERVER + n] = {**copy.deepcopy(template), "id": FIRST_SERVER + n}
    return fake_clore


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.stop()


def replay(events: list[PoolEvent], budget: float, cap: int) -> list[str]:
    """Every moment, in commit order, at which the pool held more than it may."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    committed, servers, over = 0.0, 0, []
    for e in events:
        if e.kind == "reserve":
            committed, servers = committed + e.amount_usd, servers + 1
        elif e.kind == "grow":
            committed += e.amount_usd
        else:
            committed, servers = committed + e.amount_usd - e.reserved_usd, servers - 1
        if committed > budget + 1e-6 or servers > cap:
            over.append(f"after event {e.seq}: ${committed:.2f} committed, {servers} servers")
    return over


def _contend(
    pg_url: str, market: FakeClore, workers: list[Worker], n: int, rentals: int, *flags: str
) -> list[dict[str, list[float]]]:
    PostgresPools(pg_url).create("org", BUDGET, per_day=False, max_servers=CAP)
    for i in range(n):
        args = (pg_url, "org", f"run-{i}", str(rentals), market.url, str(FIRST_SERVER + i))
        workers.append(Worker("contend", *args, str(START_UNIX), *flags))
    for w in workers:
        w.expect("ready")
    for w in workers:
        w.say("go")
    return [json.loads(w.expect(timeout=300)) for w in workers]


def _check_market(market: FakeClore, orders: int) -> None:
    cancels = Counter(r.body["id"] for r in market.calls("cancel_order"))
    assert len(market.orders) == orders and market.live_orders() == []
    assert set(cancels.values()) == {1}, "an order was cancelled more than once"


def test_twenty_processes_never_commit_more_than_the_pool(
    pg_url: str, market: FakeClore, workers: list[Worker]
) -> None:
    _contend(pg_url, market, workers, 20, 3)
    pools = PostgresPools(pg_url)
    events = pools.events("org")
    assert replay(events, BUDGET, CAP) == []
    assert Counter(e.kind for e in events) == {"reserve": 60, "settle": 60}
    # The cap was reached (the test did contend), and everything was given back.
    assert max(_servers_over_time(events)) == CAP
    usage = pools.usage("org")
    assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)
    assert usage.billed_usd == pytest.approx(60 * 0.05)
    _check_market(market, 60)


def test_without_the_pool_lock_the_replay_sees_the_overrun(
    pg_url: str, market: FakeClore, workers: list[Worker]
) -> None:
    _contend(pg_url, market, workers, 20, 3, "--no-lock")
    over = replay(PostgresPools(pg_url).events("org"), BUDGET, CAP)
    assert over, "20 unlocked contenders never overran the pool: the replay cannot see the bug"


def _servers_over_time(events: list[PoolEvent]) -> list[int]:
    out, servers = [], 0
    for e in events:
        servers += {"reserve": 1, "grow": 0, "settle": -1}[e.kind]
        out.append(servers)
    return out


def _holder(pg_url: str, market: FakeClore, name: str, servers: list[int], *flags: str) -> Worker:
    args = (pg_url, "org", name, market.url, str(START_UNIX), "30", *map(str, servers))
    worker = Worker("hold", *args, *flags)
    worker.expect("ready")
    worker.say("go")
    return worker


def test_a_killed_holder_is_reaped_once_by_three_racing_reapers(
    pg_url: str, market: FakeClore, workers: list[Worker]
) -> None:
    PostgresPools(pg_url).create("org", BUDGET, per_day=False, max_servers=CAP)
    holder = _holder(pg_url, market, "run-dead", [FIRST_SERVER, FIRST_SERVER + 1])
    workers.append(holder)
    holder.expect("holding")
    orders = [o.id for o in market.live_orders()]
    market.clock.advance(3600)  # an hour billed
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait(timeout=10)
    assert PostgresPools(pg_url).usage("org").servers == 2  # dead, not reaped: still counted
    results: list[list[object]] = []
    start = threading.Barrier(3)

    def reaper(n: int) -> None:
        pools, ledger = PostgresPools(at(pg_url, LATER)), PostgresLedger(pg_url)
        start.wait()
        results.append(list(reap(pools, ledger, market.client(), f"reaper-{n}", settle_s=0)))

    threads = [threading.Thread(target=reaper, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reaped = [r for got in results for r in got]
    assert len(reaped) == 1 and reaped[0].done and reaped[0].lease.holder == "run-dead"
    cancels = Counter(r.body["id"] for r in market.calls("cancel_order"))
    assert cancels == dict.fromkeys(orders, 1)
    usage = PostgresPools(pg_url).usage("org")
    assert (usage.servers, usage.holders) == (0, 0)
    # The cost recorded is what the API billed: 1108.85 CLORE/day for an hour at the rental's
    # own rate (0.1 USD/h for 1000 CLORE/day, the renter's 5 % fee in it), and the creation
    # fee, which the wallet loses as it is: the renter's fee is on the spend only.
    per_unit = 0.1 * 24 / 1000.0
    fee_rate = market.renter_fee_rates["on_demand"]["CLORE-Blockchain"]
    expected = sum(
        market.spend(o) * per_unit + market.orders[o].creation_fee * per_unit / (1 + fee_rate)
        for o in orders
    )
    assert usage.billed_usd == pytest.approx(expected, abs=1e-5)
    assert PostgresLedger(pg_url).unreleased() == []


def test_a_frozen_holder_is_fenced_after_the_takeover(
    pg_url: str, market: FakeClore, workers: list[Worker]
) -> None:
    PostgresPools(pg_url).create("org", BUDGET, per_day=False, max_servers=CAP)
    holder = _holder(pg_url, market, "run-frozen", [FIRST_SERVER])
    workers.append(holder)
    holder.expect("holding")
    holder.proc.send_signal(signal.SIGSTOP)
    try:
        [done] = reap(
            PostgresPools(at(pg_url, LATER)), PostgresLedger(pg_url), market.client(), "r",
            settle_s=0,
        )  # fmt: skip
        assert done.done and market.live_orders() == []
    finally:
        holder.proc.send_signal(signal.SIGCONT)
    assert "taken over" in json.loads(holder.expect(timeout=30))["lost"]  # its next heartbeat
    for command in ("heartbeat", "settle", "reserve"):
        holder.say(command)
        reply = json.loads(holder.expect())
        assert reply in ({"heartbeat": False}, {"refused": command, "why": reply.get("why")})
        assert reply == {"heartbeat": False} or "taken over" in reply["why"]
    assert PostgresPools(pg_url).usage("org").servers == 0


def test_a_crash_between_the_create_and_the_order_id_is_found_by_the_reaper(
    pg_url: str, market: FakeClore, workers: list[Worker]
) -> None:
    PostgresPools(pg_url).create("org", BUDGET, per_day=False, max_servers=CAP)
    holder = _holder(pg_url, market, "run-crash", [FIRST_SERVER], "--crash-after-create")
    workers.append(holder)
    assert holder.proc.wait(timeout=60) == 9
    [rental] = PostgresLedger(pg_url).unreleased()
    assert (rental.state, rental.order_id) == ("intent", None)
    [order] = market.live_orders()
    [done] = reap(
        PostgresPools(at(pg_url, LATER)), PostgresLedger(pg_url), market.client(), "r",
        settle_s=0,
    )  # fmt: skip
    assert done.done and [a.order_id for a in done.actions] == [order.id]
    assert market.live_orders() == [] and PostgresLedger(pg_url).unreleased() == []
    assert PostgresPools(pg_url).usage("org").servers == 0


def test_an_immediate_restart_mid_run_loses_and_doubles_nothing(
    pg_url: str, pg_cluster: PgCluster, market: FakeClore, workers: list[Worker]
) -> None:
    PostgresPools(pg_url).create("org", BUDGET, per_day=False, max_servers=CAP)
    for i in range(6):
        args = (pg_url, "org", f"run-{i}", "25", market.url, str(FIRST_SERVER + i))
        workers.append(Worker("contend", *args, str(START_UNIX)))
    for w in workers:
        w.expect("ready")
    for w in workers:
        w.say("go")
    pools = PostgresPools(pg_url)
    while len(pools.events("org")) < 20:  # mid-run: some done, most still to come
        pass
    pg_cluster.restart_immediate()
    for w in workers:
        done = json.loads(w.expect(timeout=300))
        assert w.proc.wait(timeout=30) == 0
        assert done["reconnects"] >= 1  # its connections died with the server: it came back
    events = PostgresPools(pg_url).events("org")
    assert replay(events, BUDGET, CAP) == []
    assert Counter(e.kind for e in events) == {"reserve": 150, "settle": 150}
    assert len({e.reservation for e in events}) == 150
    usage = PostgresPools(pg_url).usage("org")
    assert (usage.servers, usage.billed_usd) == (0, pytest.approx(150 * 0.05))
