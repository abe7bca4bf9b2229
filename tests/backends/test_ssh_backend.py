"""The `--backend ssh` backend: hosts as the run's servers, connections kept and replaced."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.backends.base import RunOutcome
from runner.backends.ssh import backend as backend_module
from runner.backends.ssh.backend import SshBackend, default_identity, parse_host
from runner.backends.ssh.connection import ConnectOptions, Endpoint, SshConnection
from runner.backends.ssh.exec import ExecOptions
from runner.backends.ssh.keys import ClientKey
from runner.core.model import FailureKind, Job
from runner.engine.run_command import RunOptions, execute
from runner.errors import InfrastructureError, RunMustStop, UsageError
from runner.spec.loader import parse_pipeline
from tests.sshd_fixture import (
    RecordingSink,
    SshServer,
    free_port,
    make_request,
    write_private_key,
)

JOB = Job(id="j", name="j", run="true")


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("root@203.0.113.7:2222", Endpoint("203.0.113.7", 2222, "root")),
        ("ubuntu@gpu-box.example.org", Endpoint("gpu-box.example.org", 22, "ubuntu")),
        ("10.0.0.5", Endpoint("10.0.0.5", 22, "root")),
        ("root@[2001:db8::1]:2200", Endpoint("2001:db8::1", 2200, "root")),
    ],
)
def test_parse_host(text: str, endpoint: Endpoint) -> None:
    assert parse_host(text) == endpoint


@pytest.mark.parametrize(
    "text", ["", "root@", "@host", "root@host:", "root@host:0", "root@host:70000", "a b@c", "h:x"]
)
def test_parse_host_rejects_malformed(text: str) -> None:
    with pytest.raises(UsageError, match="USER@HOST") as info:
        parse_host(text)
    assert "root@" in info.value.hint


def test_backend_needs_distinct_hosts(ssh_key: ClientKey) -> None:
    with pytest.raises(UsageError, match="at least one"):
        SshBackend([], ssh_key)
    with pytest.raises(UsageError, match="twice"):
        SshBackend([Endpoint("h"), Endpoint("h")], ssh_key)


def test_default_identity_is_found_like_ssh_does(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--identity"):
        default_identity(tmp_path)
    (tmp_path / ".ssh").mkdir()
    write_private_key(tmp_path / ".ssh" / "id_rsa")
    write_private_key(tmp_path / ".ssh" / "id_ed25519")
    assert default_identity(tmp_path) == tmp_path / ".ssh" / "id_ed25519"


def _backend(server: SshServer, *targets: str) -> SshBackend:
    return _booked(SshBackend.from_flags(list(targets) or [server.target], server.client_key))


def _booked(backend: SshBackend) -> SshBackend:
    """`backend` with its hosts booked as the run's servers 1, 2, ... in the order given, as
    a run's core books them before it places a job."""
    backend.book_offer((JOB,), backend.capacity() or 1)
    return backend


def test_place_run_done_on_one_host(sshd_server: SshServer, tmp_path: Path) -> None:
    backend = _backend(sshd_server)
    try:
        assert backend.capacity() == 1
        place = backend.place(1, JOB, threading.Event())
        assert place.name == sshd_server.target
        assert place.facts["host_key"].startswith("SHA256:")
        sink = RecordingSink()
        outcome = backend.run(place, make_request("echo hi", tmp_path), sink, threading.Event())
        assert (outcome.exit_code, outcome.failure) == (0, None)
        assert outcome.facts["host_key"] == place.facts["host_key"]
        assert sink.stdout == b"hi\n"
        backend.attempt_done(place)
        assert not backend.lost(1)
    finally:
        backend.shutdown()


def test_capacity_is_the_number_of_hosts_each_a_server(sshd_server: SshServer) -> None:
    port = sshd_server.port
    backend = _backend(sshd_server, f"root@127.0.0.1:{port}", f"root@localhost:{port}")
    try:
        assert backend.capacity() == 2
        places = [backend.place(server, JOB, threading.Event()) for server in (1, 2)]
        assert [p.name for p in places] == [f"root@127.0.0.1:{port}", f"root@localhost:{port}"]
    finally:
        backend.shutdown()


def test_dead_connection_is_replaced_at_the_next_place(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    backend = _backend(sshd_server)
    try:
        place = backend.place(1, JOB, threading.Event())
        backend._conns[place.name].transport.close()  # the network dropped between jobs
        request = make_request("true", tmp_path)
        lost = backend.run(place, request, RecordingSink(), threading.Event())
        assert lost.failure is FailureKind.SERVER_LOST
        backend.attempt_done(place)
        place = backend.place(1, JOB, threading.Event())
        ok = backend.run(place, request, RecordingSink(), threading.Event())
        assert ok.failure is None
    finally:
        backend.shutdown()


def test_an_unreachable_only_host_stops_the_run_within_connects_own_bound(
    ssh_key: ClientKey,
) -> None:
    quick = ConnectOptions(tries=2, backoff_s=0.01)
    backend = SshBackend([Endpoint("127.0.0.1", free_port())], ssh_key, connect_options=quick)
    with pytest.raises(
        RunMustStop,
        match=r"no SSH connection after 2 tries in \d+\.\d s: .*"
        r"Connection refused; no other SSH host to try",
    ):
        _booked(backend).place(1, JOB, threading.Event())
    assert backend.lost(1)
    backend.shutdown()


def test_a_refused_key_is_asked_once_and_the_run_stops(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_private_key(tmp_path / "wrong")
    backend = _booked(SshBackend.from_flags([sshd_server.target], tmp_path / "wrong"))
    calls = _count_connects(monkeypatch)
    with pytest.raises(RunMustStop, match="SSH authentication failed") as info:
        backend.place(1, JOB, threading.Event())
    assert "no other SSH host to try" in str(info.value)
    assert "authorized_keys" in info.value.hint
    assert calls == [sshd_server.target]  # one login, no retries on the same answer
    backend.shutdown()


def test_a_host_that_fails_is_left_out_and_the_others_go_on(
    sshd_server: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"root@127.0.0.1:{free_port()}"
    backend = _booked(SshBackend.from_flags([sshd_server.target, dead], sshd_server.client_key))
    backend._connect_options = ConnectOptions(tries=1)
    calls = _count_connects(monkeypatch)
    try:
        first = backend.place(1, JOB, threading.Event())
        with pytest.raises(
            InfrastructureError,
            match=f"{re.escape(dead)} is left out for the "
            r"rest of the run \(1 host left\)",
        ) as info:
            backend.place(2, JOB, threading.Event())
        assert not isinstance(info.value, RunMustStop)
        assert (backend.lost(1), backend.lost(2)) == (False, True)  # the core places no more
        backend.attempt_done(first)
        for _ in range(3):
            place = backend.place(1, JOB, threading.Event())
            assert place.name == sshd_server.target
            backend.attempt_done(place)
        assert calls.count(dead) == 1
    finally:
        backend.shutdown()


def _count_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = backend_module.connect

    def counting(endpoint: Endpoint, *args: Any, **kwargs: Any) -> SshConnection:
        calls.append(str(endpoint))
        return real(endpoint, *args, **kwargs)

    monkeypatch.setattr(backend_module, "connect", counting)
    return calls


def test_shutdown_kills_a_running_job(
    sshd_server: SshServer, ssh_conn: SshConnection, tmp_path: Path
) -> None:
    backend = SshBackend(
        [Endpoint("127.0.0.1", sshd_server.port)],
        ClientKey.from_file(sshd_server.client_key),
        exec_options=ExecOptions(kill_grace_s=0.5),
    )
    place = _booked(backend).place(1, JOB, threading.Event())
    sink = RecordingSink()
    request = make_request("sleep 300 &\necho bg=$! started\nwait", tmp_path)
    result: list[RunOutcome] = []
    worker = threading.Thread(
        target=lambda: result.append(backend.run(place, request, sink, threading.Event()))
    )
    worker.start()
    assert sink.wait_for(b"started")
    backend.shutdown()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert result[0].failure is FailureKind.CANCELLED
    pid = re.search(rb"bg=(\d+)", sink.stdout).group(1).decode()  # type: ignore[union-attr]
    # The state's first letter is the state; the rest are flags (N when the tests run niced).
    assert ssh_conn.run(f"ps -o stat= -p {pid}").stdout.strip()[:1] in (b"", b"Z")


def test_a_failing_close_does_not_keep_the_dead_connection(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(sshd_server)
    try:
        place = backend.place(1, JOB, threading.Event())
        conn = backend._conns[place.name]
        conn.transport.close()  # the connection died during the job

        def broken_close() -> None:
            raise OSError("close failed")

        monkeypatch.setattr(conn, "close", broken_close)
        with pytest.raises(OSError):
            backend.attempt_done(place)
        gave_up = threading.Event()
        threading.Timer(5.0, gave_up.set).start()  # instead of waiting forever
        again = backend.place(1, JOB, gave_up)
        assert again.name == place.name
        ok = backend.run(again, make_request("true", tmp_path), RecordingSink(), gave_up)
        assert ok.failure is None  # connected afresh, not the dead connection
    finally:
        backend.shutdown()


# -- `clore-run run`: the hosts are the core's fixed servers ----------------------------------

WARM = """\
jobs:
  b: {priority: high, run: 'true', workspace: false}
  a: {run: 'sleep 1', workspace: false}
  c: {needs: a, run: 'true', workspace: false}
"""


def _run(pipeline_text: str, backend: SshBackend, tmp_path: Path) -> dict[str, list[str]]:
    """Run the pipeline through `execute`; each job's hosts, attempt by attempt."""
    pipeline = parse_pipeline(pipeline_text, "p.yml", {})
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path, backoff=lambda n: 0.0)
    record, code = execute(pipeline, backend, options, stream=io.StringIO())
    assert code == 0, [(r.job_id, r.status, r.reason) for r in record.results]
    return {r.job_id: [a.server for a in r.attempts] for r in record.results}


def test_a_job_runs_on_the_host_its_need_just_ran_on(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    # b (high priority) takes the first host, a the second; b ends first. When a ends, both
    # hosts are free: c goes where a ran (its files are warm there), not to the first host.
    port = sshd_server.port
    first, second = f"root@127.0.0.1:{port}", f"root@localhost:{port}"
    hosts = _run(WARM, SshBackend.from_flags([first, second], sshd_server.client_key), tmp_path)
    assert hosts == {"b": [first], "a": [second], "c": [second]}


def test_a_host_that_fails_mid_run_is_left_out_and_its_job_runs_on_another(
    sshd_server: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dead = f"root@127.0.0.1:{free_port()}"
    backend = SshBackend.from_flags([sshd_server.target, dead], sshd_server.client_key)
    backend._connect_options = ConnectOptions(tries=1)
    calls = _count_connects(monkeypatch)
    text = "jobs:\n" + "".join(f"  j{i}: {{run: 'true', workspace: false}}\n" for i in range(4))
    hosts = _run(text, backend, tmp_path)
    # One job tried the dead host once; its retry and every other job ran on the live one.
    assert calls.count(dead) == 1
    assert sorted(len(h) for h in hosts.values()) == [1, 1, 1, 2]
    assert all(h[-1] == sshd_server.target for h in hosts.values())
