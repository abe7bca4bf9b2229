"""`runner start --pool`: each runner's worst case over `max-minutes` reserved in the budget pool
before its create, held past the start (the runner lives on), and settled by `runner stop` at
what the order was billed (runner/gh_runner/pool.py). On the private PostgreSQL of
tests/pg_fixture.py."""

from __future__ import annotations

import pytest

from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_on_sshd import fake_cost_usd
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host
from tests.gh_runner.harness import host as host


def _start(host: Host, pg_url: str, *extra: str) -> list[str]:
    """With a coordinator, the ledger (and the host history) are its database's too."""
    args = host.start_args("--pool", "gpu", "--coordinator", pg_url, "--max-minutes", "30", *extra)
    args[args.index("--ledger") + 1] = pg_url
    return args


def test_a_runner_reserves_in_the_pool_before_its_create_and_stop_settles_the_bill(
    host: Host, pg_url: str
) -> None:
    pools = PostgresPools(pg_url)
    pools.create("gpu", 5.0, per_day=False, max_servers=4)
    started = host.invoke(_start(host, pg_url))
    assert started.exit_code == 0, started.output
    record = host.record()
    (rental,) = record.runners
    assert record.pool is not None and record.pool.name == "gpu"
    assert pg_url not in host.outputs[-1] and pg_url not in record.to_json()
    usage = pools.usage("gpu")
    # Held past the start: one server, its worst case (30 min and the boot bound, fee in).
    assert usage.servers == 1 and usage.holders == 1 and 0.05 < usage.reserved_usd < 0.5
    (reservation,) = pools.reservations(record.pool.holder)
    assert reservation.id == rental.reservation_id and reservation.rental_id is not None
    assert reservation.amount_usd == pytest.approx(usage.reserved_usd)

    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    stopped = host.invoke(
        ["runner", "stop", "--record", str(host.tmp / "record.json"), "--coordinator", pg_url]
    )
    assert stopped.exit_code == 0, stopped.output
    assert "pool gpu: 1 reservation(s) settled at what was billed" in stopped.output
    usage = pools.usage("gpu")
    assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)
    assert usage.billed_usd == pytest.approx(fake_cost_usd(host.fake), rel=0.01)
    kinds = [e.kind for e in pools.events("gpu")]
    assert kinds[0] == "reserve" and kinds[-1] == "settle" and kinds.count("settle") == 1


def test_a_stop_without_the_coordinator_leaves_the_reservation_to_the_lease(
    host: Host, pg_url: str
) -> None:
    pools = PostgresPools(pg_url)
    pools.create("gpu", 5.0, per_day=False, max_servers=4)
    started = host.invoke(_start(host, pg_url))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output  # the server is cancelled all the same
    assert "pool gpu: not settled (no coordinator given)" in stopped.output
    assert host.fake.live_orders() == []
    assert pools.usage("gpu").servers == 1  # until the lease runs out and a reaper settles


def test_a_pool_that_cannot_hold_a_runner_rents_nothing(host: Host, pg_url: str) -> None:
    pools = PostgresPools(pg_url)
    pools.create("gpu", 0.02, per_day=False, max_servers=4)
    started = host.invoke(_start(host, pg_url))
    assert started.exit_code == 3, started.output
    assert "more than the whole budget of pool gpu" in " ".join(started.output.split())
    assert host.fake.calls("create_order") == []
    assert host.github.runners == {}
    usage = pools.usage("gpu")
    assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)


def test_a_pool_needs_the_coordinator(host: Host) -> None:
    started = host.invoke(host.start_args("--pool", "gpu"))
    assert started.exit_code == 2, started.output
    assert "a pool lives in the shared database" in started.output
    assert host.fake.calls("create_order") == [] and host.github.seen == []
