"""Pipelines on the clore backend end to end: a fake Clore API whose orders point at a real sshd.

Every test ends with no live order on the fake and every rental released in the ledger.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import threading
from pathlib import Path

import pytest

from runner.backends.base import NO_STAGES, Place
from runner.backends.clore import bill
from runner.backends.clore.api import RetryPolicy
from runner.backends.clore.backend import CloreBackend
from runner.core.events import AttemptEnded
from runner.core.model import Attempt, JobStatus, Pipeline, RunRecord
from runner.core.placing import PlacingCore
from runner.core.rentals import (
    CoreCommand,
    Provisioning,
    ReleaseServer,
    RentFailed,
    RentServer,
    ServerDeploying,
    ServerEvent,
    ServerReady,
    ServerReleased,
    StartOn,
)
from runner.engine.run_command import RunOptions, execute
from runner.engine.server_book import book_for
from runner.errors import InfrastructureError
from runner.spec.loader import load_pipeline, parse_pipeline
from tests.fakes.clore_api import FakeClore, Faults
from tests.fakes.clore_on_sshd import Setup, fake_cost_usd
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.sshd_fixture import SshServer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class ByHand:
    """The backend as the core's adapter, its commands carried out by hand on the test's
    thread (the driver would run each rent and release on a thread of its own)."""

    def __init__(self, setup: Setup, pipeline: Pipeline, run_id: str = "run-1") -> None:
        self.backend, self.ledger = setup.backend(pipeline, run_id)
        self.clock = setup.clock
        self.jobs = {j.id: j for j in pipeline.jobs}
        book = book_for(
            self.backend,
            pipeline.jobs,
            pipeline.concurrency,
            self.clock.time(),
            pipeline.budget_usd,
            Provisioning.ON_DEMAND,
        )
        self.core = PlacingCore(pipeline.jobs, book)
        self.todo: list[CoreCommand] = list(self.core.start(self.clock.time()))
        self.heard: list[ServerEvent] = []

    def tell(self, event: ServerEvent) -> None:
        self.heard.append(event)
        self.todo += self.core.handle(event, self.clock.time())

    def rent(self) -> ServerEvent:
        """Carry out the core's next rent: what the adapter reported (the core hears it)."""
        cmd = next(c for c in self.todo if isinstance(c, RentServer))
        self.todo.remove(cmd)
        reports: list[ServerEvent] = []
        self.backend.rent(cmd, self.jobs[cmd.for_job], reports.append)
        # At most one ServerDeploying (online, its image pulling) before the one outcome.
        *deploying, event = reports
        assert all(isinstance(e, ServerDeploying) for e in deploying) and len(deploying) <= 1
        for early in deploying:  # the core hears it; `heard` keeps the outcomes
            self.todo += self.core.handle(early, self.clock.time())
        self.tell(event)
        return event

    def rent_until_ready(self) -> None:
        while not any(isinstance(e, ServerReady) for e in self.heard):
            self.rent()

    def place(self, job_id: str) -> Place:
        start = next(c for c in self.todo if isinstance(c, StartOn) and c.job_id == job_id)
        self.todo.remove(start)
        return self.backend.place(start.server, self.jobs[job_id], threading.Event())

    def ended(self, job_id: str, place: Place) -> float:
        """The attempt on `place` passed: the adapter settles its cost (answered), the core
        hears it."""
        owed = self.backend.attempt_done(place)
        now = self.clock.time()
        self.todo += self.core.handle(AttemptEnded(job_id, Attempt(1, now, now, 0, None)), now)
        assert owed is not None  # a rented server's attempt always has its bill
        return owed.usd

    def release(self) -> ServerReleased:
        """Carry out the core's next give-back."""
        cmd = next(c for c in self.todo if isinstance(c, ReleaseServer))
        self.todo.remove(cmd)
        reports: list[ServerEvent] = []
        self.backend.release_server(cmd.server, cmd.reason, reports.append)
        (event,) = reports
        assert isinstance(event, ServerReleased)
        self.tell(event)
        return event

    @property
    def spent_usd(self) -> float:
        """What the core counts as spent: its estimates, replaced by the API's figures."""
        return self.core.book.spent_usd


def statuses(record: RunRecord) -> dict[str, JobStatus]:
    return {r.job_id: r.status for r in record.results}


def test_ml_example_passes_reuses_servers_and_costs_agree(setup: Setup) -> None:
    pipeline = load_pipeline(EXAMPLES / "ml-pipeline.yml")
    record, code, ledger = setup.run(pipeline)
    assert code == 0, [(r.job_id, r.status, r.reason) for r in record.results]
    assert set(statuses(record).values()) == {JobStatus.PASSED}
    rented = len(setup.fake.orders)
    assert rented < len(pipeline.jobs)  # servers were reused
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    ours = record.total_cost_usd
    theirs = fake_cost_usd(setup.fake)
    assert theirs > 0 and abs(ours - theirs) / theirs < 0.01, (ours, theirs)
    print(
        f"\nML example: {rented} servers for {len(pipeline.jobs)} jobs; "
        f"{len(setup.fake.requests)} API calls; cost ${ours:.6f} vs fake ${theirs:.6f}"
    )


def test_create_answered_500_code_1_while_created_rents_once(setup: Setup) -> None:
    setup.fake.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
    pipeline = parse_pipeline(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n", "p.yml", {}
    )
    _record, code, _ = setup.run(pipeline)
    assert code == 0
    assert len(setup.fake.orders) == 1
    assert len(setup.fake.calls("create_order")) == 1


def test_not_enough_balance_stops_the_run(setup: Setup) -> None:
    # The wallet read says enough, the creates say otherwise (someone else spent it).
    setup.fake.fail_next("create_order", Faults.NOT_ENOUGH_BALANCE, times=2)
    pipeline = parse_pipeline(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo hi}\n  b: {run: echo hi}\n", "p.yml", {}
    )
    record, code, _ = setup.run(pipeline)
    assert code == 3, [(r.job_id, r.status, r.reason) for r in record.results]
    assert "not_enough_balance" in " ".join(r.reason for r in record.results)
    assert setup.fake.orders == {}


def test_a_balance_short_of_the_first_rentals_worst_case_rents_nothing(setup: Setup) -> None:
    # The 3090 at 2 USD/day with the 5 % fee, for start-up (6 min) + the 60-minute timeout +
    # 2 minutes to kill it and fetch its files, plus the 0.1 creation fee:
    # 0.0875 x 68/60 + 0.1 = 0.199 USD-Blockchain at worst.
    setup.fake.balances["USD-Blockchain"] = 0.19
    pipeline = parse_pipeline(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n"
        "  b: {run: echo hi, gpu: {type: '3090'}}\n",
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    assert code == 3, [(r.job_id, r.status, r.reason) for r in record.results]
    reasons = " ".join(r.reason for r in record.results)
    assert "the USD-Blockchain wallet holds 0.19" in reasons and "up to 0.199167" in reasons
    assert "nothing was rented" in reasons
    assert setup.fake.calls("create_order") == []
    assert len(setup.fake.calls("wallets")) == 1  # read once, not per job


def test_no_offer_fits_is_an_error_with_closest_offers(setup: Setup) -> None:
    pipeline = parse_pipeline(
        "jobs:\n  a: {run: echo hi, gpu: {type: H100}}\n  b: {run: echo hi, gpu: {type: '3090'}}\n",
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    by_id = {r.job_id: r for r in record.results}
    assert by_id["a"].status is JobStatus.ERROR and "H100" in by_id["a"].reason
    assert len(by_id["a"].attempts) == 1  # not retried: retrying cannot help
    assert by_id["b"].status is JobStatus.PASSED
    assert code == 3


def test_budget_too_small_for_the_second_job(setup: Setup) -> None:
    # 3090 on-demand at $0.0875/h with the fee: start-up (6 min) + a 60-minute timeout + 2
    # minutes after it + the creation fee commit $0.199; the 4090 at $0.131/h commits $0.249.
    # The first fits, the second not.
    pipeline = parse_pipeline(
        """\
        budget: 0.24
        concurrency: 2
        currency: USD-Blockchain
        jobs:
          a: {run: echo a, gpu: {type: '3090', max-price: 0.1}}
          b: {run: echo b, gpu: {type: '4090', max-price: 0.2}}
        """.replace("        ", ""),
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    reasons = {r.job_id: (r.status, r.reason) for r in record.results}
    errors = [v for v in reasons.values() if v[0] is JobStatus.ERROR]
    assert errors and "budget $0.24 would be exceeded" in errors[0][1], reasons
    assert code == 3


def test_order_that_never_goes_online_moves_to_the_next_offer(setup: Setup) -> None:
    setup.fake.online_after_s = 10_000.0  # nothing ever comes up within the timeout
    pipeline = parse_pipeline("jobs:\n  a: {run: echo hi, gpu: {type: RTX}}\n", "p.yml", {})
    hand = ByHand(setup, pipeline)
    for _ in range(2):
        failed = hand.rent()
        assert isinstance(failed, RentFailed) and "not online" in failed.reason
    hand.backend.shutdown()
    assert len(setup.fake.orders) == 2  # the core rented another host, each was cancelled
    assert len({o.server_id for o in setup.fake.orders.values()}) == 2


def test_429_bursts_on_reads_are_ridden_out(setup: Setup) -> None:
    setup.fake.fail_next("marketplace", Faults.RATE_LIMITED, times=2)
    setup.fake.fail_next("my_orders", Faults.RATE_LIMITED, times=3)
    pipeline = parse_pipeline("jobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n", "p.yml", {})
    record, code, _ = setup.run(pipeline)
    assert code == 0, record.results
    assert len(setup.fake.orders) == 1


class SlowStartSshd:
    """A loopback port whose first `refusals` connections are dropped at once, like an sshd
    that is not up yet on a server Clore already calls online; later ones reach the real sshd."""

    def __init__(self, target_port: int, refusals: int) -> None:
        import socket

        self.target_port = target_port
        self.refusals = refusals
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.dropped < self.refusals:
                self.dropped += 1
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pipe(src: object, dst: object) -> None:
    import socket

    assert isinstance(src, socket.socket) and isinstance(dst, socket.socket)
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def test_online_but_sshd_not_answering_yet_is_waited_for(setup: Setup) -> None:
    gate = SlowStartSshd(setup.sshd.port, refusals=2)
    setup.fake.ssh_port = gate.port
    try:
        pipeline = parse_pipeline("jobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n", "p.yml", {})
        record, code, _ = setup.run(pipeline)
    finally:
        gate.close()
    assert code == 0, record.results
    assert gate.dropped == 2 and len(setup.fake.orders) == 1  # same order, probed until up


def test_sshd_that_never_answers_cancels_and_excludes_the_host(setup: Setup) -> None:
    gate = SlowStartSshd(setup.sshd.port, refusals=3)  # the first order's 3 tries all fail
    setup.fake.ssh_port = gate.port
    try:
        pipeline = parse_pipeline("jobs:\n  a: {run: echo hi, gpu: {type: RTX}}\n", "p.yml", {})
        record, code, _ = setup.run(pipeline)
    finally:
        gate.close()
    assert code == 0, record.results
    first, second = sorted(setup.fake.orders.values(), key=lambda o: o.id)
    assert first.server_id != second.server_id and not first.live


class PreemptingBackend(CloreBackend):
    """Calls `preempt` once the first attempt has printed its marker."""

    preempt: object = None

    def run(self, place, request, sink, cancel, stages=NO_STAGES):  # type: ignore[no-untyped-def]
        outer = self

        class Watch:
            def write(self, stream, data):  # type: ignore[no-untyped-def]
                sink.write(stream, data)
                if b"working" in data and request.attempt == 1 and callable(outer.preempt):
                    threading.Thread(target=outer.preempt, args=(place,), daemon=True).start()

        return super().run(place, request, Watch(), cancel, stages)


def test_spot_preemption_mid_job_is_retried_elsewhere(
    setup: Setup, sshd_killable: SshServer
) -> None:
    pipeline = parse_pipeline(
        """\
        jobs:
          train:
            gpu: {type: RTX, spot: true, max-price: 0.5}
            run: |
              echo working
              test "$CLORE_RUN_ATTEMPT" = 2 || sleep 60
        """.replace("        ", ""),
        "p.yml",
        {},
    )
    setup.fake.ssh_port = sshd_killable.port
    backend, ledger = setup.backend(pipeline)
    sshd_killable.authorize(backend.provisioner.key.public_line)
    preempting = PreemptingBackend(
        **{f: getattr(backend, f) for f in ("client", "provisioner", "clock", "settings")}
    )

    def preempt(place: object) -> None:
        from runner.backends.base import Place

        assert isinstance(place, Place)
        setup.fake.ssh_port = setup.sshd.port  # the next server is a healthy one
        setup.fake.end_order(int(place.facts["order_id"]))  # outbid
        sshd_killable.kill_all()  # ...and the machine goes away

    preempting.preempt = preempt
    (setup.tmp / "ws").mkdir()
    options = RunOptions(
        out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws", backoff=lambda n: 0.01
    )
    record, code = execute(pipeline, preempting, options, io.StringIO())
    result = record.results[0]
    assert code == 0, result
    assert [str(a.failure) for a in result.attempts] == ["FailureKind.SERVER_LOST", "None"]
    servers = [o.server_id for o in sorted(setup.fake.orders.values(), key=lambda o: o.id)]
    assert len(servers) == 2 and servers[0] != servers[1]
    assert all(r.state == "released" for r in ledger.rentals("run-1"))


def test_sigterm_mid_run_cancels_everything_fast(setup: Setup) -> None:
    import os
    import signal
    import time

    pipeline = parse_pipeline(
        """\
        concurrency: 2
        jobs:
          a: {run: "echo working; sleep 60", gpu: {type: '3090'}}
          b: {run: "echo working; sleep 60", gpu: {type: '4090'}}
          c: {needs: [a, b], run: echo never}
        """.replace("        ", ""),
        "p.yml",
        {},
    )
    backend, ledger = setup.backend(pipeline)
    started: list[str] = []
    sent: list[float] = []

    class Signalling(CloreBackend):
        def run(self, place, request, sink, cancel, stages=NO_STAGES):  # type: ignore[no-untyped-def]
            class Watch:
                def write(self, stream, data):  # type: ignore[no-untyped-def]
                    sink.write(stream, data)
                    if b"working" in data:
                        started.append(request.job.id)
                        if len(started) == 2:
                            sent.append(time.monotonic())
                            os.kill(os.getpid(), signal.SIGTERM)

            return super().run(place, request, Watch(), cancel, stages)

    signalling = Signalling(
        **{f: getattr(backend, f) for f in ("client", "provisioner", "clock", "settings")}
    )
    (setup.tmp / "ws").mkdir()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    screen = io.StringIO()
    record, code = execute(pipeline, signalling, options, screen)
    took = time.monotonic() - sent[0]
    assert code == 130
    # Stopped by hand, the run still says which servers it gave back (and what they cost).
    (given,) = [line for line in screen.getvalue().splitlines() if "given back: " in line]
    assert given.count("#") == 2, given
    assert took < 7.0, took
    assert {r.job_id: r.status for r in record.results} == {
        "a": JobStatus.CANCELLED,
        "b": JobStatus.CANCELLED,
        "c": JobStatus.CANCELLED,
    }
    assert (setup.tmp / "out" / "summary.json").exists()
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    # ...and so do its reports: the jobs show no server and $0.00, the total paid for two.
    said = given.removeprefix("clore-run: ")
    assert said.startswith("rented and given back: NVIDIA GeForce RTX ")  # GPUs, server
    summary = json.loads((setup.tmp / "out" / "summary.json").read_text())
    assert said in summary["warnings"]
    assert " · **rented and given back**: " in (setup.tmp / "out" / "summary.md").read_text()
    assert screen.getvalue().count("rented and given back") == 1  # said once on screen


_ONE_3090 = "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, gpu: {type: '3090'}}\n"
_ONE_AT_A_TIME = "concurrency: 1\n"


def _two_jobs(extra_a: str = "", extra_b: str = "", head: str = "") -> Pipeline:
    return parse_pipeline(
        f"{head}currency: USD-Blockchain\njobs:\n"
        f"  a: {{run: echo a, gpu: {{type: '3090'{extra_a}}}}}\n"
        f"  b: {{run: echo b, gpu: {{type: '3090'{extra_b}}}}}\n",
        "p.yml",
        {},
    )


def _without_spend(fake: FakeClore) -> None:
    """`spend` is optional in `my_orders` (reference §2.3): the API may not report it."""
    original = fake._order_json

    def order_json(order: object, now: float) -> dict[str, object]:
        reply = original(order, now)  # type: ignore[arg-type]
        reply.pop("spend", None)
        return reply

    fake._order_json = order_json  # type: ignore[method-assign]


def _close(ours: float, theirs: float) -> bool:
    return theirs > 0 and abs(ours - theirs) / theirs < 0.01


def test_idle_server_given_back_counts_in_spent_without_api_spend(setup: Setup) -> None:
    _without_spend(setup.fake)
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    assert hand.rent() == ServerReady(1)
    place = hand.place("a")
    setup.clock.advance(600)
    job_usd = hand.ended("a", place)  # the core gives the server back...
    setup.clock.advance(3600)  # ...and the give-back takes an hour to be carried out
    hand.release()
    hand.backend.shutdown()
    theirs = fake_cost_usd(setup.fake)
    assert _close(hand.spent_usd, theirs), (hand.spent_usd, theirs)
    ours = job_usd + hand.backend.idle_cost_usd()
    assert _close(ours, theirs), (ours, theirs)


def test_an_order_that_never_served_a_job_is_still_counted(setup: Setup) -> None:
    gate = SlowStartSshd(setup.sshd.port, refusals=3)  # the first order's sshd never answers
    setup.fake.ssh_port = gate.port
    pipeline = parse_pipeline(
        "currency: USD-Blockchain\njobs:\n  a: {run: echo hi, gpu: {type: RTX}}\n", "p.yml", {}
    )
    hand = ByHand(setup, pipeline)
    try:
        hand.rent_until_ready()
    finally:
        gate.close()
    *failed, ready = hand.heard
    assert all(isinstance(f, RentFailed) for f in failed), hand.heard
    assert sum(f.cost_usd for f in failed if isinstance(f, RentFailed)) > 0  # the core heard it
    place = hand.place("a")
    job_usd = hand.ended("a", place)
    assert hand.release().server == ready.server
    hand.backend.shutdown()
    assert len(setup.fake.orders) == 2  # the first was cancelled: it cost its fee and minutes
    theirs = fake_cost_usd(setup.fake)
    assert _close(hand.spent_usd, theirs), (hand.spent_usd, theirs)
    ours = job_usd + hand.backend.idle_cost_usd()
    assert _close(ours, theirs), (ours, theirs)


def test_a_rental_that_arrives_after_shutdown_is_still_counted(setup: Setup) -> None:
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    rent = hand.backend.provisioner.rent

    def rent_while_shutting_down(
        job: object, offer: object, cancel: object, *rest: object, **kw: object
    ) -> object:
        # The run is cancelled while this rental is being set up (on this very thread, so
        # the shutdown's wait for it cannot end but by its bound)...
        options = hand.backend.provisioner.options
        hand.backend.provisioner.options = dataclasses.replace(options, signal_setup_within_s=0)
        hand.backend.stop_soon()
        hand.backend.shutdown()
        never = threading.Event()  # ...past the rental's last look at its cancel
        return rent(job, offer, never, *rest, **kw)  # type: ignore[arg-type]

    hand.backend.provisioner.rent = rent_while_shutting_down  # type: ignore[method-assign]
    failed = hand.rent()
    assert isinstance(failed, RentFailed) and "shutting down" in failed.reason
    theirs = fake_cost_usd(setup.fake)
    assert _close(hand.backend.idle_cost_usd(), theirs), (hand.backend.idle_cost_usd(), theirs)
    assert _close(failed.cost_usd, theirs), (failed.cost_usd, theirs)  # the core counts it
    assert _close(hand.spent_usd, theirs)


def test_a_spot_rental_is_budgeted_at_its_bid_not_the_spot_minimum(setup: Setup) -> None:
    # The 3090's spot minimum is 1.5 USD/day (0.0625 $/h); the bid goes 5 % above it
    # (0.0656 $/h). With the 1.25 % spot fee, for start-up + the 1-hour timeout, plus the
    # creation fee, the minimum would commit $0.1717 and the bid commits $0.1753.
    pipeline = parse_pipeline(
        "budget: 0.1735\ncurrency: USD-Blockchain\n"
        "jobs:\n  a: {run: echo hi, gpu: {type: '3090', spot: true, max-price: 0.5}}\n",
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    assert code == 3
    assert "budget $0.1735 would be exceeded" in record.results[0].reason, record.results[0]
    assert setup.fake.orders == {}


def test_a_job_running_at_shutdown_is_billed_once(setup: Setup) -> None:
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    hand.rent()
    place = hand.place("a")
    setup.clock.advance(3600)  # an hour into the job
    hand.backend.shutdown()  # the run is cancelled: every server is given back at once
    owed = hand.backend.attempt_done(place)  # ...and the job's attempt ends after that
    theirs = fake_cost_usd(setup.fake)
    # Without a bill the engine prices the attempt again from its hourly rate, on top of
    # the idle cost that already holds the same hour.
    assert owed is not None
    job_usd = owed.usd
    assert _close(job_usd + hand.backend.idle_cost_usd(), theirs), (job_usd, theirs)
    assert job_usd > 0.9 * theirs  # the hour was the job's, not idle time


def _reuse(setup: Setup, pipeline: Pipeline) -> RunRecord:
    """a runs, then b (one server at a time): b reuses a's server only if it fits."""
    record, code, _ = setup.run(pipeline)
    assert code == 0, record.results
    return record


def test_reuse_respects_the_price_the_server_is_rented_at(setup: Setup) -> None:
    # a bids 5 % over the 3090's spot minimum (0.0656 $/h); b takes at most 0.064 $/h, which
    # the minimum (0.0625 $/h) fits but a's server does not.
    record = _reuse(
        setup,
        _two_jobs(", spot: true, max-price: 0.5", ", spot: true, max-price: 0.064", _ONE_AT_A_TIME),
    )
    b = record.results[1].attempts[-1]
    assert float(b.facts["usd_per_hour"]) <= 0.064 + 1e-9, b.facts
    assert len(setup.fake.orders) == 2


def test_reuse_gives_an_on_demand_job_no_spot_server(setup: Setup) -> None:
    record = _reuse(setup, _two_jobs(", spot: true, max-price: 0.5", "", _ONE_AT_A_TIME))
    b = record.results[1].attempts[-1]
    assert not setup.fake.orders[int(b.facts["order_id"])].spot  # b cannot be outbid


def test_nothing_is_rented_once_the_run_shuts_down(setup: Setup) -> None:
    hand = ByHand(setup, _two_jobs())
    hand.backend.shutdown()
    failed = hand.rent()
    assert isinstance(failed, RentFailed) and "shutting down" in failed.reason
    # A create now costs a creation fee, and holds the API for 5.5 s of GitHub's 7.5 s.
    assert setup.fake.calls("create_order") == []


def test_a_server_this_run_holds_is_not_ordered_again(setup: Setup) -> None:
    setup.fake.online_after_s = 5.0  # b still chooses from the marketplace read a chose from
    pipeline = parse_pipeline(
        "concurrency: 2\ncurrency: CLORE-Blockchain\n"
        "jobs:\n  a: {run: echo a, gpu: {type: RTX}}\n  b: {run: echo b, gpu: {type: RTX}}\n",
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    assert code == 0, record.results
    assert record.results[0].server != record.results[1].server
    refused = [(c.body, c.status) for c in setup.fake.calls("create_order") if c.code != 0]
    assert refused == []  # no create wasted on our own server (and the host not excluded)


def test_when_only_a_server_this_run_holds_fits_the_next_job_waits_for_it(setup: Setup) -> None:
    setup.fake.online_after_s = 5.0
    record, code, _ = setup.run(_two_jobs(head="concurrency: 2\n"))  # one USD 3090 for sale
    assert code == 0, record.results
    assert record.results[0].server == record.results[1].server
    assert len(setup.fake.calls("create_order")) == 1


def test_a_ledger_failing_after_the_create_does_not_leave_the_order_running(
    setup: Setup,
) -> None:
    from runner.stores.ledger import LedgerError

    hand = ByHand(setup, _two_jobs())
    ledger = hand.ledger
    record_intent = ledger.record_intent

    def intent_then_disk_full(*args: object, **kwargs: object) -> int:
        rental_id = record_intent(*args, **kwargs)  # type: ignore[arg-type]

        def fail(*_args: object, **_kwargs: object) -> None:
            raise LedgerError(f"ledger {ledger.path}: cannot write: disk I/O error")

        ledger.set_order = fail  # type: ignore[method-assign]
        ledger.set_state = fail  # type: ignore[method-assign]
        return rental_id

    ledger.record_intent = intent_then_disk_full  # type: ignore[method-assign]
    try:
        failed = hand.rent()
        assert isinstance(failed, RentFailed) and "disk I/O error" in failed.reason
    finally:
        # The ledger could not record the release either, so the run says so.
        with pytest.raises(InfrastructureError, match="not confirmed released"):
            hand.backend.shutdown()
    assert len(setup.fake.orders) == 1
    assert setup.fake.live_orders() == []  # cancelled at once, not left for `cleanup`


def test_a_chain_runs_on_one_server(setup: Setup) -> None:
    """The next job starting must not see the server it is about to reuse given back."""
    pipeline = parse_pipeline(
        "jobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n"
        "  b: {needs: a, run: echo b, gpu: {type: '3090'}}\n",
        "p.yml",
        {},
    )
    record, code, _ = setup.run(pipeline)
    assert code == 0, record.results
    assert len(setup.fake.orders) == 1
    assert record.results[0].server == record.results[1].server


def test_a_rental_left_unconfirmed_is_named_with_the_cleanup_command(setup: Setup) -> None:
    # A create failing ambiguously (HTTP 500, code 1) whose order never shows: the intent stays
    # open in the ledger, the job goes to the next host, and the run ends saying what to do.
    setup.fake.fail_next("create_order", Faults.DB_ERROR)
    pipeline = parse_pipeline("jobs:\n  a: {run: echo hi, gpu: {type: RTX}}\n", "p.yml", {})
    backend, ledger = setup.backend(pipeline)
    (setup.tmp / "ws").mkdir()
    console = io.StringIO()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    record, code = execute(pipeline, backend, options, console)
    assert code == 0, record.results
    assert [r.state for r in ledger.rentals("run-1")] == ["intent", "released"]
    assert console.getvalue().count("1 rental(s) of run run-1 not confirmed released") == 1
    assert (
        "clore-run: 1 rental(s) of run run-1 not confirmed released (servers " in console.getvalue()
    )
    assert "\nhint: run `clore-run cleanup --run run-1`\n" in console.getvalue()  # one shape
    # The reports say it too, where CI looks: summary.json's warnings (and so an annotation).
    summary = json.loads((setup.tmp / "out" / "summary.json").read_text())
    assert any("not confirmed released" in w for w in summary["warnings"]), summary["warnings"]


def test_a_create_still_waiting_for_its_slot_gives_up_on_cancel(setup: Setup) -> None:
    """A run being stopped must not wait 5.5 s for a create it no longer wants, nor send it."""
    from runner.backends.clore.provision import ProvisionCancelled

    pipeline = parse_pipeline("jobs:\n  a: {run: echo a, gpu: {type: '3090'}}\n", "p.yml", {})
    backend, ledger = setup.backend(pipeline)
    offer = backend.market.offers()[0]
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ProvisionCancelled):
        backend.provisioner.rent(pipeline.jobs[0], offer, cancel)
    assert setup.fake.calls("create_order") == []
    assert [r.state for r in ledger.rentals("run-1")] == ["failed"]


def test_a_marketplace_that_cannot_be_read_ends_the_jobs_with_why_and_writes_reports(
    setup: Setup,
) -> None:
    setup.fake.fail_next("marketplace", Faults.BAD_GATEWAY, times=20)
    pipeline = parse_pipeline(
        "jobs:\n  a: {run: echo hi, retries: 0}\n  b: {needs: [a], run: echo hi}\n", "p.yml", {}
    )
    record, code, _ = setup.run(pipeline)
    assert code == 3
    (a, b) = record.results
    # the read that failed in words, once (not "could not be read: Clore API marketplace: ...")
    assert a.status is JobStatus.ERROR
    assert a.reason.startswith("Clore API (listing the market): HTTP 502 with a non-JSON reply")
    assert b.status is JobStatus.SKIPPED
    assert setup.fake.calls("create_order") == []
    assert (setup.tmp / "out" / "summary.json").exists()


def test_the_boot_wait_has_its_own_bound_counted_in_the_worst_case(setup: Setup) -> None:
    """A server that never came online held the job 15 minutes whatever the job said, billed
    (and past 10 minutes charged the creation fee) while the budget had reserved less."""
    setup.fake.online_after_s = 10_000.0
    pipeline = parse_pipeline(
        "jobs:\n  a:\n    run: echo hi\n    gpu: {type: RTX}\n    timeout-minutes: 3\n"
        "    boot-timeout-minutes: 2\n",
        "p.yml",
        {},
    )
    job = pipeline.jobs[0]
    assert job.boot_timeout_s == 120.0
    hand = ByHand(setup, pipeline)
    backend = hand.backend
    offer = backend.market.offers()[0]
    hourly = backend.market.hourly(job, offer)
    fee_usd = backend.provisioner.creation_fee_usd(offer, False)
    from runner.core import money

    # The core's worst case (the pool reserves the same): the run's 6-minute bound, or the
    # job's own where longer, the timeout, and 2 minutes fetching the files after it.
    after_s = 120.0
    assert backend.provisioner.worst_case_usd(job, offer) == pytest.approx(
        money.worst_case_usd(hourly, 360.0 + 180.0 + after_s, fee_usd, bill.CREATION_FEE_GRACE_S)
    )
    longer = dataclasses.replace(job, boot_timeout_s=900.0)
    assert backend.provisioner.worst_case_usd(longer, offer) == pytest.approx(
        money.worst_case_usd(hourly, 900.0 + 180.0 + after_s, fee_usd, bill.CREATION_FEE_GRACE_S)
    )
    failed = hand.rent()
    assert isinstance(failed, RentFailed) and "not online after 120 s" in failed.reason
    backend.shutdown()
    lived = [o.ended_unix - o.created_unix for o in setup.fake.orders.values() if o.ended_unix]
    assert lived and max(lived) < 120.0 + 31.0  # one poll past the bound at most


def test_an_adapter_that_raises_while_renting_ends_the_job_instead_of_hanging_the_run(
    setup: Setup,
) -> None:
    backend, _ = setup.backend(_two_jobs())

    class Broken(CloreBackend):
        def _rent_for_core(self, *args: object) -> object:  # type: ignore[override]
            raise RuntimeError("boom")

    broken = Broken(
        **{f: getattr(backend, f) for f in ("client", "provisioner", "clock", "settings")}
    )
    (setup.tmp / "ws").mkdir()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    record, code = execute(_two_jobs(), broken, options, io.StringIO())
    assert code == 3
    # Each host tried failed so, and is excluded: the jobs end, saying why.
    said = " ".join(a.message for r in record.results for a in r.attempts)
    assert "internal error while renting: RuntimeError('boom')" in said, said
    assert setup.fake.calls("create_order") == []


def test_a_ready_jobs_rent_shows_its_stages_on_the_console(setup: Setup) -> None:
    # The core rents before the job's attempt exists: the person watching must still see the
    # job renting, booting and connecting, not a silent wait until its script starts.
    pipeline = parse_pipeline("jobs:\n  solo: {gpu: {type: RTX 3090}, run: echo hi}\n", "p.yml", {})
    backend, _ = setup.backend(pipeline)
    (setup.tmp / "ws").mkdir()
    out = io.StringIO()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    record, code = execute(pipeline, backend, options, out)
    assert code == 0, [(r.job_id, r.reason) for r in record.results]
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[solo]")]
    stages = [line.split()[1] for line in lines]
    assert [s for s in stages if s in ("renting", "booting", "connecting")] == [
        "renting",
        "booting",
        "connecting",
    ], lines
    assert stages.index("connecting") < stages.index("started"), lines


def test_a_spot_job_leaves_the_server_rented_for_an_on_demand_job_alone(setup: Setup) -> None:
    """The issue's two-job pipeline: `a` (any RTX, spot) must not start on the 4090 rented for
    `b` (on demand), which would make `b` rent a second one; each order runs its own job."""
    setup.fake.online_after_s = 5.0
    pipeline = parse_pipeline(
        "currency: CLORE-Blockchain\njobs:\n"
        "  a: {run: 'true', gpu: {type: RTX, spot: true}}\n"
        "  b: {run: 'true', gpu: {type: RTX 4090}}\n",
        "p.yml",
        {},
    )
    record, code, ledger = setup.run(pipeline)
    assert code == 0, record.results
    orders = {r.job_id: r.attempts[-1].facts["order_id"] for r in record.results}
    assert len(setup.fake.orders) == 2 and len(set(orders.values())) == 2, orders
    assert setup.fake.orders[int(orders["a"])].spot
    assert not setup.fake.orders[int(orders["b"])].spot
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    theirs = fake_cost_usd(setup.fake)
    assert abs(record.total_cost_usd - theirs) <= 0.01 * theirs, (record.total_cost_usd, theirs)


def test_an_order_that_lists_its_tag_only_once_online_is_still_found_after_a_good_create(
    setup: Setup,
) -> None:
    """Whether a booting order lists its http_port (our tag) is unconfirmed: if it does not,
    the run's own recovery after a create answered as a success takes the one live order on
    the server made in the create's window, not skips the host and leaves it booting."""
    setup.fake.tag_only_online = True
    setup.fake.online_after_s = 120.0  # longer than the create's recovery looks
    record, code, ledger = setup.run(parse_pipeline(_ONE_3090, "p.yml", {}))
    assert code == 0, record.results
    assert len(setup.fake.orders) == 1
    assert [r.state for r in ledger.rentals("run-1")] == ["released"]


def test_a_rent_that_comes_to_nothing_says_so_after_its_renting_line(setup: Setup) -> None:
    """A 'renting … #host' line must not stand for a server never held: the host that never
    came up is followed by a 'not rented' line with the reason."""
    first = next(s["id"] for s in setup.fake.servers.values() if "3090" in s["specs"]["gpu"])
    setup.fake.never_online.add(first)
    pipeline = parse_pipeline(_ONE_3090, "p.yml", {})
    backend, _ = setup.backend(pipeline)
    (setup.tmp / "ws").mkdir()
    console = io.StringIO()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    execute(pipeline, backend, options, console)  # the only USD 3090: the job errors
    lines = console.getvalue().splitlines()
    renting = next(i for i, line in enumerate(lines) if "renting" in line and f"#{first}" in line)
    assert any(
        f"#{first} not rented: order" in line and "not online" in line
        for line in lines[renting + 1 :]
    ), lines


def test_a_failed_look_for_the_new_order_does_not_abandon_it(setup: Setup) -> None:
    """my_orders failing right after a good create (every retry of one read): the search goes
    on at its next delay and finds the order, instead of blaming the host and leaving the order
    booting for cleanup (the fault suite's F10)."""
    setup.fake.fail_next("my_orders", Faults.BAD_GATEWAY, times=RetryPolicy().max_attempts)
    record, code, ledger = setup.run(parse_pipeline(_ONE_3090, "p.yml", {}))
    assert code == 0, record.results
    assert len(setup.fake.orders) == 1
    assert [r.state for r in ledger.rentals("run-1")] == ["released"]
