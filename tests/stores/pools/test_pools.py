"""Budget pools on a real PostgreSQL: limits, leases and fencing, reapers, the day window,
bounded waits, concurrent migrations."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from runner.errors import UsageError
from runner.stores.pg import Timeouts
from runner.stores.pools import LeaseLost, PoolError, Refusal, Reservation, UnknownPool
from runner.stores.pools.postgres import PostgresPools
from tests.stores.pg_helpers import at, open_at_once

T0 = "2026-12-31T12:00:00Z"


def _reserve(pools: PostgresPools, *args: object, **kw: object) -> Reservation:
    made = pools.reserve(*args, **kw)  # type: ignore[arg-type]
    assert isinstance(made, Reservation), made
    return made


@pytest.fixture
def pools(pg_url: str) -> PostgresPools:
    p = PostgresPools(pg_url)
    p.create("org", 10.0, per_day=False, max_servers=2)
    return p


def test_create_show_set_and_bad_settings(pools: PostgresPools) -> None:
    assert pools.names() == ["org"]
    assert pools.settings("org").max_servers == 2
    pools.create("org", 10.0, per_day=False, max_servers=2)  # the same again: fine
    with pytest.raises(PoolError, match="already exists"):
        pools.create("org", 20.0, per_day=False, max_servers=2)
    assert pools.set("org", max_servers=3, per_day=True).per_day is True
    assert pools.settings("org").max_servers == 3
    with pytest.raises(UnknownPool, match="no pool named 'nope'"):
        pools.settings("nope")
    with pytest.raises(UnknownPool):
        pools.join("nope", "run-1", 30)
    for bad in ("", "-x", "a b", "x" * 64):
        with pytest.raises(UsageError, match="pool name"):
            pools.create(bad, 1.0, per_day=False, max_servers=1)
    with pytest.raises(UsageError, match="--budget"):
        pools.create("p", float("nan"), per_day=False, max_servers=1)
    with pytest.raises(UsageError, match="--max-servers"):
        pools.set("org", max_servers=0)


def test_reservations_stop_at_the_server_cap_and_the_budget(pools: PostgresPools) -> None:
    lease = pools.join("org", "run-1", 30)
    a = _reserve(pools, lease, 4.0, "a")
    _reserve(pools, lease, 4.0, "b")
    capped = pools.reserve(lease, 1.0)
    assert isinstance(capped, Refusal) and "holds 2 of its 2 servers" in capped.why
    assert not capped.ever
    assert pools.settle(lease, a.id, 3.5)
    assert not pools.settle(lease, a.id, 3.5)  # settled once only
    over = pools.reserve(lease, 3.0)  # 3.5 billed + 4 reserved + 3 > 10
    assert isinstance(over, Refusal) and "$3.50 billed" in over.why
    _reserve(pools, lease, 2.5)  # exactly to the budget
    never = pools.reserve(lease, 11.0)
    assert isinstance(never, Refusal) and never.ever
    usage = pools.usage("org")
    assert (usage.servers, usage.billed_usd, usage.reserved_usd) == (2, 3.5, 6.5)
    assert [e.kind for e in pools.events("org")] == ["reserve", "reserve", "settle", "reserve"]


def test_a_retried_reservation_with_its_key_is_counted_once(pools: PostgresPools) -> None:
    lease = pools.join("org", "run-1", 30)
    first = _reserve(pools, lease, 1.0, key="k-1")
    again = _reserve(pools, lease, 1.0, key="k-1")
    assert again == first and pools.usage("org").servers == 1
    # The pool full now (its own reservation among the two): a rerun after a lost reply
    # still finds what it made, rather than a refusal that would orphan it.
    _reserve(pools, lease, 1.0, key="k-2")
    assert _reserve(pools, lease, 1.0, key="k-1") == first
    assert pools.usage("org").servers == 2


def test_a_taken_lease_fences_its_old_holder(pg_url: str, pools: PostgresPools) -> None:
    holder = PostgresPools(at(pg_url, T0))
    lease = holder.join("org", "run-1", 60)
    r = _reserve(holder, lease, 2.0)
    assert holder.heartbeat(lease)
    # Not expired yet: nothing to take.
    assert PostgresPools(at(pg_url, "2026-12-31T12:00:59Z")).take_expired("reaper", 60) == []
    reaper = PostgresPools(at(pg_url, "2026-12-31T12:01:01Z"))
    assert reaper.usage("org").expired_holders == 1
    assert reaper.usage("org").servers == 1  # expired, not reaped: still counted
    [taken] = reaper.take_expired("reaper", 60)
    assert taken.holder == "run-1" and taken.token > lease.token
    assert not holder.heartbeat(lease)
    with pytest.raises(LeaseLost, match="taken over"):
        holder.reserve(lease, 1.0)
    with pytest.raises(LeaseLost):
        holder.settle(lease, r.id, 0.0)
    assert reaper.settle(taken, r.id, 1.25)
    assert reaper.finish(taken)
    assert pools.usage("org").servers == 0 and pools.usage("org").billed_usd == 1.25


def test_racing_reapers_take_each_lease_once(pg_url: str, pools: PostgresPools) -> None:
    for n in range(12):
        lease = PostgresPools(at(pg_url, T0)).join("org", f"run-{n}", 1)
        assert lease.ttl_s == 1
    later = at(pg_url, "2026-12-31T13:00:00Z")
    reapers = [PostgresPools(later) for _ in range(3)]
    taken: list[list[str]] = [[] for _ in reapers]
    start = threading.Barrier(len(reapers))

    def race(i: int) -> None:
        start.wait()
        while got := reapers[i].take_expired(f"reaper-{i}", 60, limit=1):
            taken[i].extend(lease.holder for lease in got)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(reapers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everyone = [h for got in taken for h in got]
    assert sorted(everyone) == sorted(f"run-{n}" for n in range(12))


def test_the_daily_window_turns_at_midnight_utc_on_the_database_clock(pg_url: str) -> None:
    PostgresPools(pg_url).create("daily", 10.0, per_day=True, max_servers=5)
    before = PostgresPools(at(pg_url, "2026-12-31T23:59:00Z"))
    lease = before.join("daily", "run-1", 3600)
    r = _reserve(before, lease, 6.0)
    before.settle(lease, r.id, 6.0)
    late = before.reserve(lease, 6.0)
    assert isinstance(late, Refusal) and "billed today" in late.why and not late.ever
    held = _reserve(before, lease, 3.0)  # still fits today: 6 + 3 <= 10
    after = PostgresPools(at(pg_url, "2027-01-01T00:01:00Z"))
    # A new day: yesterday's bill is out of the window, the unsettled $3 still counts.
    usage = after.usage("daily")
    assert (usage.billed_usd, usage.reserved_usd) == (0.0, 3.0)
    _reserve(after, lease, 6.0)
    refused = after.reserve(lease, 1.01)
    assert isinstance(refused, Refusal)
    after.settle(lease, held.id, 1.0)  # settled after midnight: today's bill
    assert after.usage("daily").billed_usd == 1.0
    # As a total budget, every bill counts, whatever its day.
    after.set("daily", per_day=False)
    assert after.usage("daily").billed_usd == 7.0


def test_a_session_stalled_in_a_transaction_is_ended_and_its_lock_released(
    pg_url: str, pools: PostgresPools
) -> None:
    waiter = PostgresPools(pg_url, timeouts=Timeouts(lock_ms=100, reconnect_s=0))
    lease = waiter.join("org", "run-1", 30)
    stalled = PostgresPools(pg_url, timeouts=Timeouts(idle_in_transaction_ms=300))
    conn = stalled.db._connection("stall")
    conn.execute("BEGIN")
    conn.execute("SELECT * FROM pools WHERE name = 'org' FOR NO KEY UPDATE")
    pid = conn.info.backend_pid
    with pytest.raises(PoolError, match="waited 100 ms for a lock"):
        waiter.reserve(lease, 1.0)
    _wait_gone(pg_url, pid)  # the server ended the stalled session
    _reserve(waiter, lease, 1.0)
    # The stalled client reconnects on its next use.
    assert stalled.usage("org").servers == 1 and stalled.db.reconnects == 1


def _wait_gone(url: str, pid: int) -> None:
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            q = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
            if conn.execute(q, (pid,)).fetchone() is None:
                return
            conn.execute("SELECT pg_sleep(0.05)")
    raise AssertionError(f"backend {pid} still there")


def test_five_processes_migrating_an_empty_database_at_once(pg_url: str) -> None:
    opens = (
        "from runner.stores.pools.postgres import PostgresPools\n"
        "from runner.stores.ledger.postgres import PostgresLedger\n"
        "PostgresPools(url).close(); PostgresLedger(url).close()"
    )
    assert open_at_once(pg_url, opens) == [("ledger", 2), ("pools", 4)]


def test_a_kept_server_grows_its_reservation_only_if_the_money_is_there(
    pools: PostgresPools,
) -> None:
    lease = pools.join("org", "run-1", 30)
    r = _reserve(pools, lease, 4.0)
    assert pools.grow(lease, r.id, 5.0) is None
    refused = pools.grow(lease, r.id, 1.5)
    assert isinstance(refused, Refusal) and "$9.00 committed" in refused.why
    assert pools.usage("org").reserved_usd == 9.0 and pools.usage("org").servers == 1
    assert [e.kind for e in pools.events("org")] == ["reserve", "grow"]
