"""`clore-run serve` on the clore backend: jobs that arrive over time are placed by the core.

A fake Clore API whose orders point at a real sshd; the service runs in this process. Every
test ends with no live order on the fake and every rental of the instance released in the
ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.core.model import Pipeline
from runner.core.placing import PlacingCore
from tests.backends.clore.test_clore_run import Setup
from tests.fakes.clore_api import FakeClock, FakeClore
from tests.serve.harness import FINAL, thread_server, wait_until
from tests.sshd_fixture import SshServer

CHAIN = "jobs:\n  a:\n    run: echo a\n  b:\n    needs: a\n    run: echo b\n"


@pytest.fixture
def setup(
    fake_clore: FakeClore, fake_clock: FakeClock, sshd_server: SshServer, tmp_path: Path
) -> Iterator[Setup]:
    fake_clore.ssh_host = "127.0.0.1"
    fake_clore.ssh_port = sshd_server.port
    yield Setup(fake_clore, fake_clock, sshd_server, tmp_path)
    assert fake_clore.live_orders() == [], "a server was leaked"
    assert fake_clore.violations == [], "the rate limits were exceeded"


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
