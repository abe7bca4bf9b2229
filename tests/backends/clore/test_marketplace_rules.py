"""The real marketplace's rules end to end (fake Clore, real sshd): SSH on ordinary images, the
fees as billed, 429 on create, cancel lag, spot bids raised when outbid, the renter fee rates.

Every test ends with no live order on the fake (the `setup` fixture checks).
"""

from __future__ import annotations

import io
import json
import textwrap
import threading
from pathlib import Path

import pytest

from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.clore.backend import CloreBackend
from runner.core.model import FailureKind, JobStatus, Pipeline, RunRecord
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from tests.backends.clore.test_clore_run import PreemptingBackend
from tests.fakes.clore_api import FakeOrder, Faults
from tests.fakes.clore_on_sshd import Setup, fake_cost_usd
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.sshd_fixture import SshServer

_FIELDS = ("client", "provisioner", "clock", "settings")


def pipeline_of(text: str) -> Pipeline:
    return parse_pipeline(textwrap.dedent(text), "p.yml", {})


class JobTakes(CloreBackend):
    """Each job takes `job_s` of fake time on top of its real (quick) run."""

    job_s: float = 0.0

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        outcome = super().run(place, request, sink, cancel, stages)
        self.clock.advance(self.job_s)  # type: ignore[attr-defined]
        return outcome


def run_with(
    setup: Setup, pipeline: Pipeline, job_s: float = 0.0
) -> tuple[RunRecord, int, str, Path]:
    backend, _ = setup.backend(pipeline)
    timed = JobTakes(**{f: getattr(backend, f) for f in _FIELDS})
    timed.job_s = job_s
    out = setup.tmp / "out"
    (setup.tmp / "ws").mkdir(exist_ok=True)
    options = RunOptions(out_dir=out, workspace_root=setup.tmp / "ws", backoff=lambda n: 0.01)
    console = io.StringIO()
    record, code = execute(pipeline, timed, options, console)
    setup.used = timed  # type: ignore[attr-defined]
    return record, code, console.getvalue(), out


def attempt_facts(out: Path, job_id: str) -> list[dict[str, str]]:
    summary = json.loads((out / "summary.json").read_text())
    job = next(j for j in summary["jobs"] if j["id"] == job_id)
    return [a["facts"] for a in job["attempt_details"]]


def test_a_plain_pytorch_job_passes_over_ssh(setup: Setup) -> None:
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a:
            image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
            run: echo hi
            gpu: {type: '3090'}
        """
    )
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    (create,) = setup.fake.calls("create_order")
    assert create.body["autossh_entrypoint"] is True and create.body["ssh_key"]
    assert len(setup.fake.orders) == 1


def test_an_image_said_to_run_its_own_sshd_that_does_not_is_left_with_the_reason(
    setup: Setup,
) -> None:
    # `ssh: image` on an image without sshd: the first host never answers, the reason is told
    # everywhere, and the job moves on (the second host runs Clore's own image, which has one).
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a: {image: 'pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime', ssh: image, run: echo hi}
        """
    )
    first: list[FakeOrder] = []

    def cloreai_from_the_second(order: FakeOrder) -> None:
        first.append(order)
        if len(first) > 1:
            # As if the user's image had sshd (not by changing the image: the API echoes it, and
            # an order whose echo differs from the create's cannot be proven ours).
            order.autossh = True

    setup.fake.after_create = cloreai_from_the_second
    record, code, console, out = run_with(setup, pipeline)
    assert code == 0, record.results
    assert "autossh_entrypoint" not in setup.fake.calls("create_order")[0].body
    port = setup.fake.no_sshd_port
    said = f"sshd never answered on 127.0.0.1:{port} after"
    assert said in console
    assert said in (out / "logs" / "a.log").read_text()
    (facts,) = attempt_facts(out, "a")
    assert said in facts["skipped_hosts"]
    assert first[0].server_id != first[1].server_id and not first[0].live


@pytest.mark.parametrize("spot", [False, True], ids=["on-demand", "spot"])
@pytest.mark.parametrize("job_s", [300.0, 1500.0], ids=["5-min", "25-min"])
def test_reported_cost_is_what_the_wallet_lost(setup: Setup, spot: bool, job_s: float) -> None:
    gpu = "{type: '3090', spot: true, max-price: 0.5}" if spot else "{type: '3090'}"
    pipeline = pipeline_of(
        f"""\
        currency: USD-Blockchain
        jobs:
          a: {{run: echo a, gpu: {gpu}}}
        """
    )
    before = setup.fake.balances["USD-Blockchain"]
    record, code, _, out = run_with(setup, pipeline, job_s)
    assert code == 0, record.results
    (order,) = setup.fake.orders.values()
    lost = before - setup.fake.balances["USD-Blockchain"]  # 1 USD-Blockchain is 1 USD here
    assert lost == pytest.approx(fake_cost_usd(setup.fake))
    ours = record.total_cost_usd
    assert abs(ours - lost) / lost < 0.01, (ours, lost)
    (facts,) = attempt_facts(out, "a")
    # The order is given back after its last attempt ended: its bill is the order's.
    (given,) = setup.used.spend.given  # type: ignore[attr-defined]
    billed = given.rental.order_cost
    creation = billed.creation_fee_usd
    assert (creation > 0) is (setup.fake.lived_s(order.id) >= 600)
    assert (creation > 0) is (job_s > 600)
    rate = 0.0125 if spot else 0.05
    assert billed.renter_fee_usd == pytest.approx(billed.rental_usd * rate, abs=1e-9)
    assert facts["renter_fee_source"] == "account" and float(facts["renter_fee_rate"]) == rate
    print(
        f"\n{'spot' if spot else 'on-demand'} {job_s / 60:.0f} min: "
        f"{len(setup.fake.requests)} API calls; create to SSH ready "
        f"{facts['ssh_ready_after_s']} s (fake clock); reported ${ours:.6f}, billed ${lost:.6f}"
    )


def test_a_budget_only_the_fee_less_arithmetic_would_pass_rents_nothing(setup: Setup) -> None:
    # The 3090 listed at 2 USD/day: start-up (6 min) + the 60-minute timeout + 2 minutes to
    # kill it and fetch its files cost 0.0944 at the listed price, 0.0992 with the 5 % fee,
    # 0.1992 with the creation fee.
    pipeline = pipeline_of(
        """\
        budget: 0.19
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: '3090'}}
        """
    )
    record, code, _, _ = run_with(setup, pipeline)
    (result,) = record.results
    assert code == 3 and result.status is JobStatus.ERROR
    assert "budget $0.19 would be exceeded by $0.0092: " in result.reason  # not "by $0.01"
    assert "5 % renter fee" in result.reason and "$0.10 creation fee" in result.reason
    assert setup.fake.calls("create_order") == []


def test_two_429s_on_create_end_in_one_order_on_the_first_choice_host(setup: Setup) -> None:
    setup.fake.fail_next("create_order", Faults.RATE_LIMITED, times=2)
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n"
    )
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    creates = setup.fake.calls("create_order")
    assert [c.status for c in creates] == [429, 429, 200]
    (order,) = setup.fake.orders.values()
    assert {c.body["renting_server"] for c in creates} == {order.server_id} == {88028}


def test_a_five_second_cancel_lag_is_confirmed_not_reported_unconfirmed(setup: Setup) -> None:
    setup.fake.cancel_lag_s = 5.0
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo a, gpu: {type: RTX}}\n"
    )
    record, code, console, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    assert "unconfirmed" not in console and "not confirmed" not in console
    checks = setup.fake.calls("my_orders")
    cancel = setup.fake.calls("cancel_order")[0]
    assert sum(c.t > cancel.t for c in checks) >= 2  # looked again after the lag


def test_an_outbid_spot_order_is_rebid_and_the_job_passes_on_the_same_host(setup: Setup) -> None:
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.1}}
        """
    )

    def rival_outbids(order: FakeOrder) -> None:
        setup.fake.rival_bids[order.server_id].append((order.price_per_day * 1.02, order.currency))

    setup.fake.after_create = rival_outbids
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    (order,) = setup.fake.orders.values()
    (rebid,) = setup.fake.calls("set_spot_price")
    rival = setup.fake.rival_bids[order.server_id][0][0]
    assert rebid.body["desired_price"] > rival and rebid.code == 0
    assert order.price_per_day == rebid.body["desired_price"]
    assert order.price_per_day * (1 + 0.0125) / 24 <= 0.1  # within the cap, fee included


def test_a_raise_limited_to_a_step_climbs_by_steps_on_the_same_host(setup: Setup) -> None:
    # Should the API cap a raise as it caps a lowering, the bid climbs one step at a time.
    setup.fake.raise_max_step = 0.05
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.1}}
        """
    )

    def rival_outbids(order: FakeOrder) -> None:
        setup.fake.rival_bids[order.server_id].append((order.price_per_day + 0.08, order.currency))

    setup.fake.after_create = rival_outbids
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    (order,) = setup.fake.orders.values()
    answers = [c.code for c in setup.fake.calls("set_spot_price")]
    # Over the rival in one go is refused; one step (still under it), refused, one more step.
    assert answers == [6, 0, 6, 0]
    assert order.price_per_day > setup.fake.rival_bids[order.server_id][0][0]


def test_an_outbid_with_no_room_under_the_cap_moves_to_another_host(setup: Setup) -> None:
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: RTX, spot: true, max-price: 0.07}}
        """
    )
    outbid: list[int] = []

    def rival_outbids_first(order: FakeOrder) -> None:
        if not outbid:
            outbid.append(order.server_id)
            setup.fake.rival_bids[order.server_id].append((2.0, order.currency))  # over the cap

    setup.fake.after_create = rival_outbids_first
    record, code, console, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    assert setup.fake.calls("set_spot_price") == []
    servers = [o.server_id for o in sorted(setup.fake.orders.values(), key=lambda o: o.id)]
    assert servers[0] == outbid[0] and len(servers) == 2 and servers[1] != servers[0]
    assert "outbid, and no higher bid fits" in console


def test_a_spot_bid_starts_over_the_highest_rival_bid(setup: Setup) -> None:
    setup.fake.rival_bids[88028].append((1.8, "USD-Blockchain"))  # over the 1.5 minimum
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n"
        "  a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.1}}\n"
    )
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    (create,) = setup.fake.calls("create_order")
    assert create.body["spotprice"] == pytest.approx(1.8 * 1.05)


def test_the_accounts_own_fee_rates_are_used(setup: Setup) -> None:
    setup.fake.renter_fee_rates["on_demand"]["USD-Blockchain"] = 0.025  # Proof-of-Holding
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n"
    )
    record, code, _, out = run_with(setup, pipeline)
    assert code == 0
    (facts,) = attempt_facts(out, "a")
    assert float(facts["usd_per_hour"]) == pytest.approx(2 / 24 * 1.025, rel=1e-3)
    assert len(setup.fake.calls("renter_fees")) == 1
    assert abs(record.total_cost_usd - fake_cost_usd(setup.fake)) < 0.01 * fake_cost_usd(setup.fake)


def test_renter_fees_unreadable_falls_back_to_the_documented_rates_and_says_so(
    setup: Setup,
) -> None:
    setup.fake.fail_next("renter_fees", Faults.INVALID_ENDPOINT)
    setup.fake.renter_fee_rates["on_demand"]["USD-Blockchain"] = 0.05
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n"
    )
    record, code, console, out = run_with(setup, pipeline)
    assert code == 0, record.results
    (facts,) = attempt_facts(out, "a")
    assert facts["renter_fee_source"] == "documented" and facts["renter_fee_rate"] == "0.05"
    assert "your fee rates could not be read" in console  # in words, not by endpoint


def test_a_short_balance_stops_every_later_rental_too(setup: Setup) -> None:
    """Rents under way after the wallet was found short get the same answer, not a create."""
    from runner.core.rentals import RentFailed
    from tests.backends.clore.test_clore_run import ByHand

    setup.fake.balances["USD-Blockchain"] = 0.19  # the 3090's worst case is 0.199
    pipeline = pipeline_of(
        "concurrency: 2\ncurrency: USD-Blockchain\njobs:\n"
        "  a: {run: echo a, gpu: {type: '3090'}}\n  b: {run: echo b, gpu: {type: RTX}}\n"
    )
    hand = ByHand(setup, pipeline)  # the core rents for both at once
    try:
        for _ in pipeline.jobs:
            failed = hand.rent()
            assert isinstance(failed, RentFailed) and failed.fatal, failed
            assert "wallet holds 0.19," in failed.reason
    finally:
        hand.backend.shutdown()
    assert setup.fake.calls("create_order") == []
    assert len(setup.fake.calls("wallets")) == 1


def test_when_every_fitting_host_failed_the_error_says_why_not_just_no_offer(
    setup: Setup,
) -> None:
    # The only USD 3090 is outbid over the cap: the job's error names that, not "no offer fits".
    setup.fake.after_create = lambda order: setup.fake.rival_bids[order.server_id].append(
        (2.0, order.currency)
    )
    pipeline = pipeline_of(
        "currency: USD-Blockchain\njobs:\n"
        "  a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.07}}\n"
    )
    record, code, _, _ = run_with(setup, pipeline)
    (result,) = record.results
    assert code == 3 and result.status is JobStatus.ERROR
    first = result.attempts[0].message
    assert "1 offers failed to start" in first and "outbid, and no higher bid fits" in first


def test_an_outbid_running_spot_order_is_rebid_once_and_the_job_passes_on_the_same_host(
    setup: Setup, sshd_killable: SshServer
) -> None:
    # Outbid mid-job, the container stops (the job dies with it) and the order stays listed,
    # offline: one raise of the bid wins the server back and the retry runs on it.
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          train:
            gpu: {type: '3090', spot: true, max-price: 0.1}
            run: |
              echo working
              test "$CLORE_RUN_ATTEMPT" = 2 || sleep 60
        """
    )
    setup.fake.ssh_port = sshd_killable.port
    backend, ledger = setup.backend(pipeline)
    sshd_killable.authorize(backend.provisioner.key.public_line)

    def container_stops(_order: FakeOrder) -> None:
        setup.fake.ssh_port = setup.sshd.port  # where the restarted container's sshd answers
        sshd_killable.kill_all()

    setup.fake.on_container_stop = container_stops
    rivals: list[float] = []
    outbidding = PreemptingBackend(**{f: getattr(backend, f) for f in _FIELDS})
    outbidding.preempt = lambda place: rivals.append(
        setup.fake.outbid_now(int(place.facts["order_id"]))
    )
    out, console = setup.tmp / "out", io.StringIO()
    (setup.tmp / "ws").mkdir()
    options = RunOptions(out_dir=out, workspace_root=setup.tmp / "ws", backoff=lambda n: 0.01)
    record, code = execute(pipeline, outbidding, options, console)
    (result,) = record.results
    assert code == 0, result
    assert [a.failure for a in result.attempts] == [FailureKind.SERVER_LOST, None]
    (order,) = setup.fake.orders.values()  # one order: the retry ran on the same host
    first, second = attempt_facts(out, "train")
    assert first["order_id"] == second["order_id"] == str(order.id)
    (rebid,) = setup.fake.calls("set_spot_price")
    assert rebid.code == 0 and rebid.body["desired_price"] > rivals[0] == pytest.approx(
        1.5 * 1.05 * 1.02
    )
    assert order.price_per_day * (1 + 0.0125) / 24 <= 0.1  # within the cap, fee included
    assert float(second["usd_per_hour"]) == pytest.approx(order.price_per_day * 1.0125 / 24, 1e-3)
    assert "outbid on server 88028: bid raised" in console.getvalue()
    assert "retrying on the same server" in (out / "logs" / "train.log").read_text()
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    billed = fake_cost_usd(setup.fake)
    assert abs(record.total_cost_usd - billed) < 0.01 * billed


def test_a_raise_under_a_new_spot_minimum_is_priced_again_from_the_book(setup: Setup) -> None:
    pipeline = pipeline_of(
        """\
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.1}}
        """
    )

    def minimum_rises_and_a_rival_outbids(order: FakeOrder) -> None:
        setup.fake.servers[order.server_id]["price"]["spot"][order.currency] = 1.9
        setup.fake.rival_bids[order.server_id].append((1.6, order.currency))  # ours: 1.575

    setup.fake.after_create = minimum_rises_and_a_rival_outbids
    record, code, _, _ = run_with(setup, pipeline)
    assert code == 0, record.results
    (order,) = setup.fake.orders.values()
    answers = [(c.body["desired_price"], c.code) for c in setup.fake.calls("set_spot_price")]
    assert answers == [(pytest.approx(1.6 * 1.05), 6), (pytest.approx(1.9 * 1.05), 0)]
    assert order.price_per_day == pytest.approx(1.9 * 1.05)
