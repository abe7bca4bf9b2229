"""`runner start --pool`: the lease and the ledger under one run id (so a pool reaper
reconciles the runners' rentals), a runner's lease never taken by `cleanup --coordinator` while
it lives (the start's process ends, the runner does not), and `runner stop` settling even
after a reaper took the lease. On the private PostgreSQL of tests/pg_fixture.py."""

from __future__ import annotations

import pytest

from runner.stores.ledger import open_ledger
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host
from tests.gh_runner.harness import host as host


def _start(host: Host, pg_url: str) -> None:
    args = host.start_args("--pool", "gpu", "--coordinator", pg_url, "--max-minutes", "30")
    args[args.index("--ledger") + 1] = pg_url
    started = host.invoke(args)
    assert started.exit_code == 0, started.output


def _stop(host: Host, pg_url: str) -> str:
    stopped = host.invoke(
        ["runner", "stop", "--record", str(host.tmp / "record.json"), "--coordinator", pg_url]
    )
    assert stopped.exit_code == 0, stopped.output
    return stopped.output


@pytest.mark.slow
def test_the_lease_and_the_ledger_share_one_run_id_and_the_lease_names_no_process(
    host: Host, pg_url: str
) -> None:
    pools = PostgresPools(pg_url)
    pools.create("gpu", 5.0, per_day=False, max_servers=4)
    _start(host, pg_url)
    record = host.record()
    (rental,) = record.runners
    assert record.pool is not None and record.pool.holder == rental.run_id
    with open_ledger(pg_url) as ledger:
        assert [r.order_id for r in ledger.rentals(record.pool.holder)] == [str(rental.order_id)]
    (held,) = [h for h in pools.live_leases() if h.holder == record.pool.holder]
    # No process to prove dead: `cleanup --coordinator` waits for the lease to run out.
    assert held.owner is None
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    _stop(host, pg_url)


@pytest.mark.slow
def test_stop_settles_after_a_reaper_took_the_lease(host: Host, pg_url: str) -> None:
    pools = PostgresPools(pg_url)
    pools.create("gpu", 5.0, per_day=False, max_servers=4)
    _start(host, pg_url)
    record = host.record()
    (rental,) = record.runners
    assert record.pool is not None
    taken = pools.take_holder(record.pool.holder, "a-reaper", 300.0)
    assert taken is not None and taken.token != record.pool.token
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    said = _stop(host, pg_url)
    assert "pool gpu: 1 reservation(s) settled at what was billed" in said, said
    usage = pools.usage("gpu")
    assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)
