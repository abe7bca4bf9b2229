"""Rent ahead, end to end: the fake Clore API with a 25 s boot, its orders on a real sshd.

The clock runs at ten times real time (`FastClock`: boots that overlap must overlap, which
the fake clock every sleeper advances would not do): a 25 s boot takes 2.5 real seconds, a
job's `sleep 0.5` five clock seconds.
"""

from __future__ import annotations

import io
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug.serving import WSGIRequestHandler

from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.rental import ProvisionOptions
from runner.backends.clore.settings import CloreSettings
from runner.backends.ssh.connection import ConnectOptions
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import JobStatus, Pipeline, RunRecord
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import FakeClore
from tests.fakes.fast_clock import SPEED, FastClock
from tests.sshd_fixture import SshServer

BOOT_S = 25.0  # create -> online on the fake, clock seconds
JOB_S = 0.5 * SPEED  # each job's script, clock seconds


@pytest.fixture
def clock() -> FastClock:
    return FastClock()


@pytest.fixture
def fake(
    httpserver: HTTPServer,
    clock: FastClock,
    sshd_server: SshServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[FakeClore]:
    fake = FakeClore(httpserver, clock)  # type: ignore[arg-type]
    monkeypatch.setattr(WSGIRequestHandler, "date_time_string", fake.date_header)
    fake.install()
    fake.online_after_s = BOOT_S
    fake.ssh_host, fake.ssh_port = "127.0.0.1", sshd_server.port
    yield fake
    assert fake.live_orders() == [], "a server was leaked"
    assert fake.violations == [], "the rate limits were exceeded"


def run(
    fake: FakeClore, clock: FastClock, sshd: SshServer, tmp: Path, pipeline: Pipeline
) -> RunRecord:
    key = ClientKey.generate()
    sshd.authorize(key.public_line)
    options = ProvisionOptions(
        first_poll_s=1.0,
        max_poll_s=2.0,
        pause=clock.pause,
        ssh=ConnectOptions(tries=3, backoff_s=0.05, max_backoff_s=0.2),
    )
    client = fake.client()
    ledger = SqliteLedger(tmp / "ledger.db")
    provisioner = Provisioner(
        client,
        ledger,
        "run-1",
        key,
        HostKeyStore(),
        clock,
        CloreSettings.of(pipeline).currency,
        options,
    )
    backend = CloreBackend(client, provisioner, clock, CloreSettings.of(pipeline))
    (tmp / "ws").mkdir(exist_ok=True)
    run_options = RunOptions(out_dir=tmp / "out", workspace_root=tmp / "ws", clock=clock)
    record, code = execute(pipeline, backend, run_options, io.StringIO())
    assert code == 0, [(r.job_id, r.status, r.reason) for r in record.results]
    assert {r.status for r in record.results} == {JobStatus.PASSED}
    assert all(r.state == "released" for r in ledger.rentals("run-1"))
    assert not [t for t in threading.enumerate() if t.name.startswith("job_") and t.is_alive()]
    return record


def chain(*gpus: str, provision: str = "ahead") -> Pipeline:
    jobs = "".join(
        f"  j{i}: {{run: sleep 0.5, estimate-minutes: {JOB_S / 60:.4f}, gpu: {{type: '{gpu}'}}"
        + (f", needs: [j{i - 1}]" if i else "")
        + "}\n"
        for i, gpu in enumerate(gpus)
    )
    text = f"provision: {provision}\ncurrency: USD-Blockchain\njobs:\n{jobs}"
    return parse_pipeline(textwrap.dedent(text), "p.yml", {})


def makespan_s(record: RunRecord) -> float:
    return record.finished_at - record.started_at


def test_a_chain_on_three_gpu_types_takes_about_one_boot_not_three(
    fake: FakeClore, clock: FastClock, sshd_server: SshServer, tmp_path: Path
) -> None:
    record = run(fake, clock, sshd_server, tmp_path, chain("3060", "3090", "4090"))
    took = makespan_s(record)
    work = 3 * JOB_S
    # One boot, the work, and the API's spacing of three creates (5.5 s each) with room for
    # SSH and polling; renting on demand waits a boot per level: 3 x 25 + 15 = 90 s at least
    # (116 s measured: benchmarks/bench_clore_fake.py prints both).
    assert took < BOOT_S + work + 2 * 5.5 + 0.6 * BOOT_S, took
    assert len(fake.orders) == 3
    print(f"\nchain on 3 GPU types, provision ahead: {took:.1f} s (boot {BOOT_S:g} s)")


def test_a_chain_on_one_gpu_type_uses_one_server(
    fake: FakeClore, clock: FastClock, sshd_server: SshServer, tmp_path: Path
) -> None:
    record = run(fake, clock, sshd_server, tmp_path, chain("3090", "3090", "3090"))
    assert len(fake.orders) == 1  # two 3090 hosts are free: nothing rented ahead of reuse
    assert makespan_s(record) < 2 * BOOT_S + 3 * JOB_S
