"""`plan` and `run` agree on money and on hosts: plan's "at most" for a job is the very worst
case run's budget reserves for its rental, plan says when run will refuse, and a host whose
maximum rental length cannot hold the job is passed over by both, and said so."""

from __future__ import annotations

import pytest

from runner.backends.clore.fees import FeeSchedule
from runner.backends.clore.plan_offers import plan_offers, render_offers
from runner.core.model import JobStatus, Pipeline, RunRecord
from runner.core.placing import PlacingCore
from runner.core.rentals import Provisioning, RentServer
from runner.engine.server_book import book_for
from runner.spec.loader import parse_pipeline
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture

PIPELINE = """\
currency: {currency}
{budget}
jobs:
  a: {{run: echo a, gpu: {{type: '3090'}}, timeout-minutes: {minutes}}}
"""


def _pipeline(
    budget: float | None = None, minutes: float = 10, currency: str = "USD-Blockchain"
) -> Pipeline:
    head = f"budget: {budget}" if budget is not None else ""
    text = PIPELINE.format(budget=head, minutes=minutes, currency=currency)
    return parse_pipeline(text, "p.yml", {})


def _plan(setup: Setup, pipeline: Pipeline) -> dict[str, object]:
    backend, _ = setup.backend(pipeline, "plan")
    fees = backend.provisioner.fees()
    offers = backend.market.offers()
    setup.clock.advance(10.0)  # the next client's first call keeps to the API's rate
    return plan_offers(
        pipeline,
        offers,
        FeeSchedule(
            fees.currency,
            fees.rates,
            fees.on_demand_creation_fee_native,
            fees.spot_creation_fee_native,
        ),
    )


def _first_rent(setup: Setup, pipeline: Pipeline) -> RentServer:
    return _first_rents(setup, pipeline)[0]


def _first_rents(setup: Setup, pipeline: Pipeline) -> list[RentServer]:
    """What run's core rents first, each with what its budget reserved for it."""
    backend, _ = setup.backend(pipeline, "run")
    book = book_for(
        backend,
        pipeline.jobs,
        pipeline.concurrency,
        setup.clock.time(),
        pipeline.budget_usd,
        Provisioning.ON_DEMAND,
    )
    out = PlacingCore(pipeline.jobs, book).start(setup.clock.time())
    backend.shutdown()
    setup.clock.advance(10.0)  # the next client's first call keeps to the API's rate
    return [c for c in out if isinstance(c, RentServer)]


def _run(setup: Setup, pipeline: Pipeline) -> tuple[RunRecord, int, object]:
    done = setup.run(pipeline)
    setup.clock.advance(10.0)  # the next client's first call keeps to the API's rate
    return done


def test_plans_at_most_is_the_worst_case_runs_budget_reserves(setup: Setup) -> None:
    pipeline = _pipeline()
    plan = _plan(setup, pipeline)
    entry = plan["jobs"]["a"]  # type: ignore[index]
    rent = _first_rent(setup, pipeline)
    assert entry["offer"]["server_id"] == int(rent.quote.host)
    assert entry["ceiling_usd"] == pytest.approx(rent.worst_case_usd, abs=1e-6)
    # The case: the boot bound and the creation fee are in it, not just the timeout.
    assert entry["ceiling_usd"] > rent.quote.usd_per_hour * 10 / 60 + 0.09


TWO_IMAGES = """\
currency: USD-Blockchain
concurrency: 2
jobs:
  small: {run: echo a, gpu: {type: '3090'}, timeout-minutes: 10}
  large:
    run: echo b
    gpu: {type: '4090'}
    timeout-minutes: 10
    image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
"""


def test_with_two_images_each_jobs_at_most_is_what_run_reserves_for_it(setup: Setup) -> None:
    """Each job's worst case counts its own image's pull: the default image pulls within the
    online bound, an image never seen may take 20 minutes more. Run reserved the longest
    image's for every rent; plan priced each job with its own."""
    pipeline = parse_pipeline(TWO_IMAGES, "p.yml", {})
    plan = _plan(setup, pipeline)
    rents = {rent.for_job: rent for rent in _first_rents(setup, pipeline)}
    assert set(rents) == {"small", "large"}
    for job_id, rent in rents.items():
        entry = plan["jobs"][job_id]  # type: ignore[index]
        assert entry["offer"]["server_id"] == int(rent.quote.host)
        assert entry["ceiling_usd"] == pytest.approx(rent.worst_case_usd, abs=1e-4)
    small, large = plan["jobs"]["small"], plan["jobs"]["large"]  # type: ignore[index]
    assert large["worst_hold_s"] - small["worst_hold_s"] == pytest.approx(20 * 60)
    assert plan["total_ceiling_usd"] == pytest.approx(
        sum(r.worst_case_usd for r in rents.values()), abs=1e-4
    )


def test_plan_says_run_will_refuse_and_run_does_at_that_budget_and_not_at_plans_figure(
    setup: Setup,
) -> None:
    ceiling = _plan(setup, _pipeline())["jobs"]["a"]["ceiling_usd"]  # type: ignore[index]
    short = _pipeline(budget=round(ceiling - 0.001, 4))
    plan = _plan(setup, short)
    text = render_offers(plan)
    assert f"run will refuse a: worst case ${ceiling:.4f}".rstrip("0") in text
    record, code, _ = _run(setup, short)
    assert record.results[0].status is JobStatus.ERROR and code == 3
    assert "would be exceeded" in record.results[0].reason
    enough = _pipeline(budget=round(ceiling + 0.0001, 4))
    assert _plan(setup, enough)["refusals"] == []
    record, code, _ = _run(setup, enough)
    assert record.results[0].status is JobStatus.PASSED and code == 0


def test_a_host_too_short_for_the_job_is_passed_over_by_plan_and_run_alike(setup: Setup) -> None:
    """The cheapest 3090 (88028) lists a 15-minute maximum: a job of 10 minutes, with the boot
    bound and fetching its files, needs 18. Plan names it and why; run rents the next 3090
    (100201, paid in CLORE)."""
    setup.fake.mrl_hours_by_server[88028] = 0.25
    pipeline = _pipeline(currency="CLORE-Blockchain")
    plan = _plan(setup, pipeline)
    entry = plan["jobs"]["a"]  # type: ignore[index]
    assert entry["offer"]["server_id"] != 88028
    text = render_offers(plan)
    assert "a: #88028: passed over: maximum rental length 15 min cannot hold" in text
    assert "worst case 18 min" in text
    record, code, _ = _run(setup, pipeline)
    assert code == 0 and record.results[0].status is JobStatus.PASSED
    hosts = {o.server_id for o in setup.fake.orders.values()}
    assert 88028 not in hosts and hosts == {entry["offer"]["server_id"]}
    assert setup.fake.ended_by_itself == {}  # no order outlived its host's maximum


def test_a_job_no_host_is_long_enough_for_fails_saying_so_in_plan_and_run(setup: Setup) -> None:
    for server in setup.fake.servers:
        setup.fake.mrl_hours_by_server[server] = 0.25
    pipeline = _pipeline()
    plan = _plan(setup, pipeline)
    assert plan["unfit"] == ["a"]
    assert "passed over" in plan["jobs"]["a"]["why"]  # type: ignore[index]
    record, code, _ = _run(setup, pipeline)
    assert record.results[0].status is JobStatus.ERROR and code == 3
    assert "maximum rental length" in record.results[0].reason
    assert setup.fake.orders == {}  # nothing rented
