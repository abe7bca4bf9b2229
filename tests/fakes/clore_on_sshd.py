"""The fake Clore API with its orders pointed at a real sshd: what every end-to-end test on the
clore backend stands on (runs, `serve`, pool runs).

The `setup` fixture ends each test by checking that no order is left live on the fake and that
the client kept to the API's rate limits; a test module imports it by name
(`from tests.fakes.clore_on_sshd import setup as setup`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.market import offer_from_server
from runner.backends.clore.models import MarketServer
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.rental import ProvisionOptions
from runner.backends.clore.settings import CloreSettings
from runner.backends.ssh.connection import ConnectOptions
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import Pipeline, RunRecord
from runner.engine.run_command import RunOptions, execute
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import FakeClore
from tests.fakes.fake_clock import FakeClock
from tests.sshd_fixture import SshServer


@dataclass
class Setup:
    fake: FakeClore
    clock: FakeClock
    sshd: SshServer
    tmp: Path

    def backend(
        self, pipeline: Pipeline, run_id: str = "run-1"
    ) -> tuple[CloreBackend, SqliteLedger]:
        client = self.fake.client()
        key = ClientKey.generate()
        self.sshd.authorize(key.public_line)  # what Clore does with `ssh_key`
        ledger = SqliteLedger(self.tmp / "ledger.db")
        options = ProvisionOptions(
            pause=lambda seconds, _cancel: self.clock.sleep(seconds),
            ssh=ConnectOptions(tries=3, backoff_s=0.05, max_backoff_s=0.2),
        )
        provisioner = Provisioner(
            client,
            ledger,
            run_id,
            key,
            HostKeyStore(),
            self.clock,
            CloreSettings.of(pipeline).currency,
            options,
        )
        backend = CloreBackend(
            client,
            provisioner,
            self.clock,
            CloreSettings.of(pipeline),
        )
        return backend, ledger

    def run(self, pipeline: Pipeline, **opts: object) -> tuple[RunRecord, int, SqliteLedger]:
        backend, ledger = self.backend(pipeline)
        (self.tmp / "ws").mkdir(exist_ok=True)
        options = RunOptions(
            out_dir=self.tmp / "out", workspace_root=self.tmp / "ws", backoff=lambda n: 0.01
        )
        for key, value in opts.items():
            setattr(options, key, value)
        record, code = execute(pipeline, backend, options, io.StringIO())
        return record, code, ledger


@pytest.fixture
def setup(
    fake_clore: FakeClore, fake_clock: FakeClock, sshd_server: SshServer, tmp_path: Path
) -> Iterator[Setup]:
    fake_clore.ssh_host = "127.0.0.1"
    fake_clore.ssh_port = sshd_server.port
    yield Setup(fake_clore, fake_clock, sshd_server, tmp_path)
    assert fake_clore.live_orders() == [], "a server was leaked"
    assert fake_clore.violations == [], "the rate limits were exceeded"


def fake_cost_usd(fake: FakeClore) -> float:
    """What the fake billed (the wallet's loss: fees included, the creation fee only past 10
    minutes), converted with each server's own USD ratio."""
    total = 0.0
    for order in fake.orders.values():
        offer = offer_from_server(
            MarketServer.model_validate(fake.servers[order.server_id]), order.currency
        )
        total += fake.billed(order.id) * (offer.usd_per_unit or 0.0)
    return total
