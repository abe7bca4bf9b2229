"""Deadlines read the clock they are given, not the machine's: a test moves time, the process
waits no real seconds for it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner.backends.base import RunRequest, Stream
from runner.backends.local import LocalBackend
from runner.backends.ssh.connection import ConnectOptions, Endpoint, connect
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import FailureKind, Job
from runner.errors import InfrastructureError
from tests.sshd_fixture import free_port


class LeapingClock:
    """Every reading is an hour after the one before."""

    def __init__(self) -> None:
        self.t = 0.0
        self.readings = 0

    def time(self) -> float:
        return 1.8e9 + self.now()

    def now(self) -> float:
        self.readings += 1
        self.t += 3600.0
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class Output:
    def __init__(self) -> None:
        self.data = b""

    def write(self, stream: Stream, data: bytes) -> None:
        self.data += data


def test_a_local_job_times_out_on_the_backends_clock(tmp_path: Path) -> None:
    """A 60 s timeout on a clock that leaps an hour at each reading: the job is stopped at once.
    On the machine's clock it would run its 20 s and pass."""
    clock = LeapingClock()
    backend = LocalBackend(tmp_path, clock=clock)
    job = Job("slow", "slow", "sleep 20", 0)
    cancel = threading.Event()
    place = backend.place(1, job, cancel)
    request = RunRequest(job, 1, {}, None, (), tmp_path / "artifacts", timeout_s=60.0)
    try:
        outcome = backend.run(place, request, Output(), cancel)
    finally:
        backend.attempt_done(place)
        backend.shutdown()
    assert outcome.failure is FailureKind.TIMEOUT
    assert clock.readings >= 2


def test_ssh_connect_pauses_and_measures_on_its_options_clock() -> None:
    """Two tries 30 s apart on a port nobody listens on: the pause goes to the clock (no real
    wait) and the message measures on it."""
    clock = LeapingClock()
    options = ConnectOptions(tries=2, backoff_s=30.0, clock=clock)
    with pytest.raises(InfrastructureError, match=r"after 2 tries in 3630\.0 s"):
        connect(Endpoint("127.0.0.1", free_port()), ClientKey.generate(), HostKeyStore(), options)
    assert clock.readings == 2
