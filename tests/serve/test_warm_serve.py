"""Warm servers in `clore-run serve` on the fake Clore with a real sshd: the next submission
runs on the server the last one left, within its trust domain, and the idle time between is
nobody's job's cost."""

from __future__ import annotations

from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import FINAL, thread_server, wait_until

KEEP_15 = WarmPolicy(keep_warm_s=900.0)


def test_the_next_submission_takes_the_warm_server_and_pays_only_its_own_time(
    setup: Setup,
) -> None:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-w1")
    with thread_server(
        setup.tmp, capacity=2, clock=setup.clock, backend=backend, warmth=KEEP_15
    ) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        a = srv.api.wait_status("s1.a", FINAL, timeout=60)
        assert a["status"] == "passed"
        setup.clock.advance(600)  # ten minutes idle: inside the keep
        srv.service.wake()
        srv.api.submit("jobs:\n  b:\n    run: echo b\n")
        b = srv.api.wait_status("s2.b", FINAL, timeout=60)
        assert b["status"] == "passed" and b["server"] == a["server"]
        assert len(setup.fake.orders) == 1
        facts = b["attempt_list"][-1]["facts"]
        assert facts["warm_server"] == "true", facts
        assert float(facts["server_wait_s"]) < 2.0
        usd_per_hour = float(facts["usd_per_hour"])
        # b's cost is its own seconds (well under a minute), not the ten idle minutes.
        assert b["cost_usd"] < usd_per_hour * 60 / 3600
        assert backend.idle_cost_usd() >= usd_per_hour * 590 / 3600
        wait_until(lambda: len(srv.service.driver.core) == 0, 10, "the core to settle all")
    assert ledger.unreleased("inst-w1") == []


def test_a_job_of_another_trust_domain_gets_a_server_of_its_own(setup: Setup) -> None:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-w2")
    with thread_server(
        setup.tmp, capacity=2, clock=setup.clock, backend=backend, warmth=KEEP_15
    ) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n", trust="repo-team.one")
        a = srv.api.wait_status("s1.a", FINAL, timeout=60)
        srv.api.submit("jobs:\n  b:\n    run: echo b\n", trust="repo-team.two")
        b = srv.api.wait_status("s2.b", FINAL, timeout=60)
        assert a["status"] == b["status"] == "passed"
        assert a["server"] != b["server"]
        assert len(setup.fake.orders) == 2
    assert ledger.unreleased("inst-w2") == []
