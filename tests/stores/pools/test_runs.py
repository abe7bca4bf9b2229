"""Whole runs on the clore backend (fake Clore, real sshd) that join a PostgreSQL pool."""

from __future__ import annotations

import pytest

from runner.core.model import JobStatus
from runner.spec.loader import load_pipeline, parse_pipeline
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools.postgres import PostgresPools
from runner.stores.pools.seat import PoolSeat
from tests.backends.clore.test_clore_run import EXAMPLES
from tests.fakes.clore_on_sshd import Setup, fake_cost_usd
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.stores.pools.test_processes import replay


def _run(setup: Setup, pg_url: str, pipeline_text: str | None, **pool: object) -> object:
    PostgresPools(pg_url).create("org", **pool)  # type: ignore[arg-type]
    pipeline = (
        load_pipeline(EXAMPLES / "ml-pipeline.yml")
        if pipeline_text is None
        else parse_pipeline(pipeline_text, "p.yml", {})
    )
    backend, _ = setup.backend(pipeline)
    backend.provisioner.ledger = PostgresLedger(pg_url, clock=setup.clock)
    backend.provisioner.seat = PoolSeat(PostgresPools(pg_url), "org", "run-1")
    setup.backend = lambda *_a, **_k: (backend, backend.provisioner.ledger)  # type: ignore[method-assign]
    return setup.run(pipeline)


def test_a_run_in_a_pool_reserves_every_rental_and_settles_at_the_bill(
    setup: Setup, pg_url: str
) -> None:
    record, code, _ = _run(setup, pg_url, None, budget_usd=50.0, per_day=False, max_servers=1)
    assert code == 0, [(r.job_id, r.status, r.reason) for r in record.results]
    pools = PostgresPools(pg_url)
    events = pools.events("org")
    assert replay(events, 50.0, 1) == []  # one server at a time: the pool's cap, not the run's
    reserved = [e for e in events if e.kind == "reserve"]
    assert len(reserved) == len(setup.fake.orders)
    usage = pools.usage("org")
    assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)
    assert usage.billed_usd == pytest.approx(fake_cost_usd(setup.fake), rel=0.01)


def test_a_rental_larger_than_the_pool_is_refused_and_rents_nothing(
    setup: Setup, pg_url: str
) -> None:
    text = "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, timeout-minutes: 600}\n"
    record, code, _ = _run(setup, pg_url, text, budget_usd=0.01, per_day=True, max_servers=4)
    [result] = record.results
    assert result.status is JobStatus.ERROR and "more than a day's budget" in result.reason
    assert setup.fake.orders == {} and code != 0
