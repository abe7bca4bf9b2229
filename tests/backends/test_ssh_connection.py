"""Connecting, authenticating, trusting host keys, and noticing a server that is gone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner.backends.ssh.backend import SshBackend
from runner.backends.ssh.connection import ConnectOptions, Endpoint, SshConnection, connect
from runner.backends.ssh.exec import ExecOptions, run_job
from runner.backends.ssh.facts import parse_gpu_facts
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import FailureKind, Job
from runner.errors import InfrastructureError, UsageError
from tests.sshd_fixture import (
    RecordingSink,
    SshServer,
    free_port,
    make_request,
    start_sshd,
    write_private_key,
)

QUICK = ConnectOptions(timeout_s=3, tries=3, backoff_s=0.05, keepalive_s=0.3, keepalive_count=3)


def _endpoint(server: SshServer) -> Endpoint:
    return Endpoint("127.0.0.1", server.port)


def test_connection_uses_fast_cipher_and_records_host_key(
    ssh_conn: SshConnection, sshd_server: SshServer
) -> None:
    host_key = paramiko.PKey.from_path(sshd_server.folder / "host_ed25519")
    assert ssh_conn.host_key_fingerprint == host_key.fingerprint
    assert ssh_conn.transport.remote_cipher == "aes128-gcm@openssh.com"


def test_ephemeral_key_logs_in_once_authorized(sshd_server: SshServer) -> None:
    key = ClientKey.generate()
    assert key.public_line.startswith("ssh-ed25519 AAAA")
    assert key.public_line.endswith(" clore-run")
    with pytest.raises(InfrastructureError, match="authentication failed"):
        connect(_endpoint(sshd_server), key, HostKeyStore(), QUICK)
    sshd_server.authorize(key.public_line)
    conn = connect(_endpoint(sshd_server), key, HostKeyStore(), QUICK)
    try:
        assert conn.run("echo $((6 * 7))").stdout == b"42\n"
    finally:
        conn.close()


def test_wrong_key_is_a_clear_auth_error_without_retries(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    write_private_key(tmp_path / "other")
    key = ClientKey.from_file(tmp_path / "other")
    patient = ConnectOptions(tries=5, backoff_s=2)  # retrying would take 30 s
    start = time.monotonic()
    with pytest.raises(InfrastructureError) as info:
        connect(_endpoint(sshd_server), key, HostKeyStore(), patient)
    assert time.monotonic() - start < 2
    assert "authentication failed" in info.value.message
    assert key.fingerprint in info.value.message
    assert "authorized_keys" in info.value.hint


def test_changed_host_key_within_a_run_is_refused(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path
) -> None:
    store = HostKeyStore()
    write_private_key(tmp_path / "impostor")
    impostor = paramiko.PKey.from_path(tmp_path / "impostor")
    store.verify("127.0.0.1", sshd_server.port, impostor)  # what the first connection saw
    with pytest.raises(InfrastructureError, match="changed within this run"):
        connect(_endpoint(sshd_server), ssh_key, store, QUICK)


def test_same_host_key_again_is_accepted(sshd_server: SshServer, ssh_key: ClientKey) -> None:
    store = HostKeyStore()
    for _ in range(2):
        connect(_endpoint(sshd_server), ssh_key, store, QUICK).close()


def test_unreachable_port_fails_after_bounded_tries(ssh_key: ClientKey) -> None:
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="after 3 tries") as info:
        connect(Endpoint("127.0.0.1", free_port()), ssh_key, HostKeyStore(), QUICK)
    assert time.monotonic() - start < 3
    assert "refused" in info.value.message.lower()


def test_cancel_stops_the_retries(ssh_key: ClientKey) -> None:
    cancel = threading.Event()
    cancel.set()
    slow = ConnectOptions(tries=10, backoff_s=5)
    with pytest.raises(InfrastructureError, match="cancelled"):
        connect(Endpoint("127.0.0.1", free_port()), ssh_key, HostKeyStore(), slow, cancel)


def test_sshd_that_starts_late_is_reached_by_retrying(tmp_path: Path) -> None:
    port = free_port()
    key_file = tmp_path / "client"
    write_private_key(key_file)
    key = ClientKey.from_file(key_file)
    patient = ConnectOptions(tries=60, backoff_s=0.05, max_backoff_s=0.2)
    got: list[object] = []
    worker = threading.Thread(
        target=lambda: got.append(
            _try(lambda: connect(Endpoint("127.0.0.1", port), key, HostKeyStore(), patient))
        )
    )
    worker.start()
    server = start_sshd(tmp_path / "late", client_key=key_file, port=port)
    try:
        worker.join(timeout=15)
        (conn,) = got
        assert isinstance(conn, SshConnection), conn
        conn.close()
    finally:
        server.kill_all()


def _try(make: object) -> object:
    try:
        return make()  # type: ignore[operator]
    except Exception as exc:
        return exc


def _run_until_lost(server: SshServer, kill: str) -> tuple[object, float, RecordingSink]:
    key = ClientKey.from_file(server.client_key)
    conn = connect(_endpoint(server), key, HostKeyStore(), QUICK)
    sink = RecordingSink()
    request = make_request("echo started\nsleep 60", Path("/nonexistent-artifacts"))
    result: list[object] = []
    worker = threading.Thread(
        target=lambda: result.append(run_job(conn, request, sink, threading.Event(), ExecOptions()))
    )
    worker.start()
    assert sink.wait_for(b"started")
    lost_at = time.monotonic()
    server.kill_all() if kill == "kill" else server.freeze()
    worker.join(timeout=15)
    assert not worker.is_alive()
    conn.close()
    return result[0], time.monotonic() - lost_at, sink


def test_sshd_killed_mid_job_is_server_lost_within_seconds(sshd_killable: SshServer) -> None:
    outcome, took, _ = _run_until_lost(sshd_killable, "kill")
    assert outcome.failure is FailureKind.SERVER_LOST  # type: ignore[attr-defined]
    assert took < 3


def test_silent_server_is_detected_by_keepalive(sshd_killable: SshServer) -> None:
    # A frozen sshd keeps the TCP connection open: only the keepalive can tell.
    outcome, took, _ = _run_until_lost(sshd_killable, "freeze")
    assert outcome.failure is FailureKind.SERVER_LOST  # type: ignore[attr-defined]
    assert "keepalive" in outcome.message  # type: ignore[attr-defined]
    assert took < QUICK.keepalive_s * (QUICK.keepalive_count + 1) + 2


@pytest.mark.slow
def test_identity_file_problems_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        ClientKey.from_file(tmp_path / "missing")
    (tmp_path / "junk").write_text("not a key")
    with pytest.raises(UsageError, match="not a usable private key"):
        ClientKey.from_file(tmp_path / "junk")
    locked = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (tmp_path / "locked").write_bytes(locked)
    with pytest.raises(UsageError, match="encrypted"):
        ClientKey.from_file(tmp_path / "locked")


def test_gpu_facts_parse_nvidia_smi_output() -> None:
    text = (
        "NVIDIA GeForce RTX 4090, 550.54.14\nNVIDIA GeForce RTX 4090, 550.54.14\n"
        "CUDA Version: 12.4\n"
    )
    assert parse_gpu_facts(text) == {
        "gpu": "2 x NVIDIA GeForce RTX 4090",
        "gpu_count": "2",
        "driver": "550.54.14",
        "cuda": "12.4",
    }
    assert parse_gpu_facts("") == {}


# --- ~/.ssh/known_hosts, for servers the user names (--backend ssh) ---


def _known_hosts(path: Path, server: SshServer, key: paramiko.PKey, hashed: bool = False) -> Path:
    name = f"[127.0.0.1]:{server.port}"
    if hashed:
        name = paramiko.HostKeys.hash_host(name)
    path.write_text(
        f"otherhost ssh-ed25519 {key.get_base64()}\n{name} {key.get_name()} {key.get_base64()}\n"
    )
    return path


@pytest.mark.parametrize("hashed", [False, True])
def test_a_host_key_other_than_known_hosts_lists_is_refused(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path, hashed: bool
) -> None:
    write_private_key(tmp_path / "impostor")
    impostor = paramiko.PKey.from_path(tmp_path / "impostor")
    known = _known_hosts(tmp_path / "known_hosts", sshd_server, impostor, hashed)
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="known_hosts") as info:
        connect(_endpoint(sshd_server), ssh_key, HostKeyStore(known), QUICK)
    assert "intercept" in info.value.hint
    assert time.monotonic() - start < 3  # refused, not retried


def test_the_host_key_known_hosts_lists_is_accepted(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path
) -> None:
    real = paramiko.PKey.from_path(sshd_server.folder / "host_ed25519")
    known = _known_hosts(tmp_path / "known_hosts", sshd_server, real, hashed=True)
    connect(_endpoint(sshd_server), ssh_key, HostKeyStore(known), QUICK).close()


def test_known_hosts_listing_only_another_key_type_is_refused(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path
) -> None:
    # The server has an ed25519 key only: a server that does not offer the listed type must
    # not get trusted on first use instead.
    ecdsa = paramiko.ECDSAKey.generate()
    known = _known_hosts(tmp_path / "known_hosts", sshd_server, ecdsa)
    start = time.monotonic()
    with pytest.raises(InfrastructureError, match="known_hosts"):
        connect(_endpoint(sshd_server), ssh_key, HostKeyStore(known), QUICK)
    assert time.monotonic() - start < 3


def test_hosts_known_hosts_does_not_list_are_trusted_on_first_use(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path
) -> None:
    (tmp_path / "known_hosts").write_text("# nothing for this host\n")
    missing = tmp_path / "no-such-file"
    for path in (tmp_path / "known_hosts", missing):
        connect(_endpoint(sshd_server), ssh_key, HostKeyStore(path), QUICK).close()


def test_ssh_backend_checks_the_users_known_hosts(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_private_key(tmp_path / "impostor")
    impostor = paramiko.PKey.from_path(tmp_path / "impostor")
    (tmp_path / ".ssh").mkdir()
    _known_hosts(tmp_path / ".ssh" / "known_hosts", sshd_server, impostor)
    monkeypatch.setenv("HOME", str(tmp_path))
    backend = SshBackend.from_flags([sshd_server.target], sshd_server.client_key)
    job = Job(id="j", name="j", run="true")
    backend.book_offer((job,), 1)  # the host is server 1
    try:
        with pytest.raises(InfrastructureError, match="known_hosts"):
            backend.place(1, job, threading.Event())
    finally:
        backend.shutdown()
