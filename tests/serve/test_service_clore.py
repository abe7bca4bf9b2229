"""`clore-run serve` on the clore backend: jobs that arrive over time are placed by the core.

A fake Clore API whose orders point at a real sshd; the service runs in this process. Every
test ends with no live order on the fake and every rental of the instance released in the
ledger.
"""

from __future__ import annotations

import threading
from typing import Any

from runner.core.model import Pipeline
from runner.core.placing import PlacingCore
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import FINAL, thread_server, wait_until

CHAIN = "jobs:\n  a:\n    run: echo a\n  b:\n    needs: a\n    run: echo b\n"


def test_jobs_submitted_over_time_run_on_servers_the_core_rents_and_reuses(setup: Setup) -> None:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-1")
    with thread_server(setup.tmp, capacity=2, clock=setup.clock, backend=backend) as srv:
        assert isinstance(srv.service.driver.core, PlacingCore)
        srv.api.submit(CHAIN)
        assert srv.api.wait_status("s1.b", FINAL, timeout=60)["status"] == "passed"
        # A later submission finds the server the chain ran on, kept or given back by the
        # book's own rules; either way it runs, and the core forgets what is settled.
        srv.api.submit("jobs:\n  c:\n    run: echo c\n")
        assert srv.api.wait_status("s2.c", FINAL, timeout=60)["status"] == "passed"
        wait_until(lambda: len(srv.service.driver.core) == 0, 10, "the core to settle all")
        servers = {srv.api.job(i)["server"] for i in ("s1.a", "s1.b")}
        assert len(servers) == 1  # the chain ran on one server: b reused a's
    assert ledger.unreleased("inst-1") == []
    assert len(setup.fake.orders) <= 2


def test_why_a_job_waits_says_its_server_is_being_rented(setup: Setup) -> None:
    backend, _ = setup.backend(Pipeline(name="serve", jobs=(), concurrency=1), "inst-2")
    gate = threading.Event()
    rent = backend.provisioner.rent

    def rent_after_the_gate(*args: Any, **kw: Any) -> Any:
        gate.wait(30)
        return rent(*args, **kw)

    backend.provisioner.rent = rent_after_the_gate  # type: ignore[method-assign]
    with thread_server(setup.tmp, capacity=1, clock=setup.clock, backend=backend) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n  b:\n    run: echo b\n")
        try:
            wait_until(
                lambda: "renting a server for it" in (srv.api.job("s1.a")["waiting_for"] or ""),
                10,
                "a's wait to name its rent",
            )
            assert srv.api.job("s1.b")["waiting_for"] == (
                "waiting for a server: 1 of 1 held (the cap)"
            )
            # Booting, no job on it yet: held all the same (it is billed from the create).
            assert srv.service.servers_held == 1
            assert srv.api.get("/stats").json()["servers_held"] == 1
        finally:
            gate.set()
        assert srv.api.wait_status("s1.b", FINAL, timeout=60)["status"] == "passed"
        # Nothing waits that could use it: the book gives it back, and it is held no more.
        wait_until(lambda: srv.service.servers_held == 0, 10, "the server given back")


def test_the_daily_spend_limit_is_a_budget_no_rental_may_pass(setup: Setup) -> None:
    # The cheapest server's worst case (start-up allowance, the hour's timeout, fetching its
    # files) is more than $0.01: nothing is rented, and the job says why it waits.
    backend, _ = setup.backend(Pipeline(name="serve", jobs=(), concurrency=1), "inst-3")
    with thread_server(
        setup.tmp, capacity=1, clock=setup.clock, backend=backend, daily_spend_limit=0.01
    ) as srv:
        (job_id,) = srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        job = srv.api.wait_status(job_id, FINAL, timeout=30)
        assert job["status"] == "error" and "a day's budget $0.01" in job["reason"], job
    assert setup.fake.calls("create_order") == []
