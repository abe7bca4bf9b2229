"""Running jobs over SSH against a real sshd on loopback."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.ssh.channel import ChannelReader, ReadStopped
from runner.backends.ssh.connection import Endpoint, SshConnection, connect
from runner.backends.ssh.exec import ExecOptions, run_job
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import FailureKind
from tests.sshd_fixture import RecordingSink, SshServer, make_request

FAST_KILL = ExecOptions(kill_grace_s=0.5, drain_s=2.0)


@pytest.fixture
def own_conn(sshd_server: SshServer, ssh_key: ClientKey) -> Iterator[SshConnection]:
    """A connection of its own, for tests where a hostile server may break it."""
    conn = connect(Endpoint("127.0.0.1", sshd_server.port), ssh_key, HostKeyStore())
    yield conn
    conn.close()


def _run(conn: SshConnection, tmp_path: Path, script: str, **kwargs: object) -> tuple:  # type: ignore[type-arg]
    sink = RecordingSink()
    request = make_request(script, tmp_path / "artifacts", **kwargs)  # type: ignore[arg-type]
    outcome = run_job(conn, request, sink, threading.Event(), FAST_KILL)
    return outcome, sink


def _gone(conn: SshConnection, pid: int) -> bool:
    """True when `pid` no longer runs on the server (a zombie awaiting its reaper counts)."""
    # The state's first letter is the state; the rest are flags (N when the tests run niced).
    result = conn.run(f"ps -o stat= -p {pid}")
    return result.stdout.strip()[:1] in (b"", b"Z")


@pytest.mark.parametrize(
    ("script", "code"),
    [("true", 0), ("exit 3", 3), ("false\necho not reached", 1), ("false | true", 1)],
)
def test_exit_code_and_verdict(
    ssh_conn: SshConnection, tmp_path: Path, script: str, code: int
) -> None:
    outcome, sink = _run(ssh_conn, tmp_path, script)
    assert outcome.exit_code == code
    assert outcome.failure is (None if code == 0 else FailureKind.TEST_FAILURE)
    assert b"not reached" not in sink.stdout  # -e stops at the first failure; pipefail sees it


def test_facts_name_the_host_key(ssh_conn: SshConnection, tmp_path: Path) -> None:
    outcome, _ = _run(ssh_conn, tmp_path, "true")
    assert outcome.facts["host_key"] == ssh_conn.host_key_fingerprint
    assert outcome.facts["host_key"].startswith("SHA256:")


def test_large_stdout_and_stderr_at_once_do_not_hang(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    script = "head -c 50000000 /dev/zero &\nhead -c 10000000 /dev/zero >&2\nwait"
    outcome, sink = _run(ssh_conn, tmp_path, script, timeout_s=60)
    assert outcome.failure is None
    assert len(sink.stdout) == 50_000_000
    assert len(sink.stderr) == 10_000_000


def test_output_that_is_not_utf8_is_kept_byte_for_byte(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    outcome, sink = _run(ssh_conn, tmp_path, r"printf '\377\376\000ok\200\n'")
    assert outcome.failure is None
    assert bytes(sink.stdout) == b"\xff\xfe\x00ok\x80\n"


def test_script_with_heredoc_markers_and_quotes_runs_verbatim(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    body = 'SCRIPT\nEOF\nit\'s "quoted" `not run` $HOME \\n'
    script = f"cat <<'END'\n{body}\nEND\necho SCRIPT\necho 'EOF'\n"
    outcome, sink = _run(ssh_conn, tmp_path, script)
    assert outcome.failure is None, sink.stderr
    assert sink.stdout.decode() == f"{body}\nSCRIPT\nEOF\n"


def test_env_values_arrive_exactly(ssh_conn: SshConnection, tmp_path: Path) -> None:
    env = {
        "SPACES": "a  b   c",
        "QUOTES": "it's \"double\" and 'single'",
        "DOLLAR": "$HOME ${PATH} $(id) `id`",
        "NEWLINES": "line1\nline2\n\nline4\n",
        "BACKSLASH": "C:\\path\\n",
        "EMPTY": "",
        "UNICODE": "ümlaut ✓",
    }
    script = "printf '%s\\0' " + " ".join(f'"${name}"' for name in env)
    outcome, sink = _run(ssh_conn, tmp_path, script, env=env)
    assert outcome.failure is None, sink.stderr
    assert sink.stdout.decode().split("\0")[:-1] == list(env.values())


def test_invalid_env_name_fails_the_job_without_running_it(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    outcome, sink = _run(ssh_conn, tmp_path, "echo ran", env={"A B": "x"})
    assert outcome.failure is FailureKind.TEST_FAILURE
    assert "A B" in outcome.message
    assert b"ran" not in sink.stdout


def test_timeout_kills_the_job_and_what_it_forked(ssh_conn: SshConnection, tmp_path: Path) -> None:
    # The background child ignores TERM, so only the KILL that follows can end it.
    script = "(trap '' TERM; exec sleep 300) &\necho bg=$!\nsleep 300"
    start = time.monotonic()
    outcome, sink = _run(ssh_conn, tmp_path, script, timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert outcome.failure is FailureKind.TIMEOUT
    assert outcome.exit_code is None
    assert elapsed < 1.0 + FAST_KILL.kill_grace_s + 3
    pid = int(re.search(rb"bg=(\d+)", sink.stdout).group(1))  # type: ignore[union-attr]
    assert _gone(ssh_conn, pid)


def test_cancel_kills_the_job_promptly(ssh_conn: SshConnection, tmp_path: Path) -> None:
    sink = RecordingSink()
    cancel = threading.Event()
    request = make_request("sleep 300 &\necho bg=$!\necho started\nwait", tmp_path)
    result: list[object] = []
    worker = threading.Thread(
        target=lambda: result.append(run_job(ssh_conn, request, sink, cancel, FAST_KILL))
    )
    worker.start()
    assert sink.wait_for(b"started")
    cancelled_at = time.monotonic()
    cancel.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 3
    (outcome,) = result
    assert outcome.failure is FailureKind.CANCELLED  # type: ignore[attr-defined]
    pid = int(re.search(rb"bg=(\d+)", sink.stdout).group(1))  # type: ignore[union-attr]
    assert _gone(ssh_conn, pid)


def test_leftover_background_process_is_killed_when_the_job_ends(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    # It keeps stdout open, which alone would hold the channel (and the job) open for 300 s.
    outcome, sink = _run(ssh_conn, tmp_path, "sleep 300 &\necho bg=$!")
    assert outcome.failure is None
    pid = int(re.search(rb"bg=(\d+)", sink.stdout).group(1))  # type: ignore[union-attr]
    assert _gone(ssh_conn, pid)


def test_workspace_upload_brings_exact_content(ssh_conn: SshConnection, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub dir").mkdir(parents=True)
    files = {
        "a.txt": b"hello\n",
        "sub dir/b.bin": bytes(range(256)) * 4000,
        "empty": b"",
        "run.sh": b"#!/bin/sh\necho hi\n",
    }
    for name, data in files.items():
        (ws / name).write_bytes(data)
    (ws / "run.sh").chmod(0o755)
    (ws / "not-shipped.txt").write_text("left out")
    script = "find . -type f | sort\nsha256sum ./a.txt './sub dir/b.bin' ./empty ./run.sh\n./run.sh"
    outcome, sink = _run(ssh_conn, tmp_path, script, workspace=ws, files=tuple(files))
    assert outcome.failure is None, sink.stderr
    lines = sink.stdout.decode().splitlines()
    assert lines[:4] == sorted(f"./{n}" for n in files)
    for name, data in files.items():
        assert f"{hashlib.sha256(data).hexdigest()}  ./{name}" in lines
    assert lines[-1] == "hi"  # the executable bit came along


def test_unreadable_workspace_file_is_named_in_the_failure(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    outcome, sink = _run(
        ssh_conn, tmp_path, "echo ran", workspace=tmp_path / "ws", files=("gone.txt",)
    )
    # Ours, not the server's: another server would fail the same way (and cost its fee).
    assert outcome.failure is FailureKind.UNAVAILABLE
    assert "on this machine: cannot read workspace file" in outcome.message
    assert "gone.txt" in outcome.message
    assert b"ran" not in sink.stdout


def test_workspace_false_gives_an_empty_folder(ssh_conn: SshConnection, tmp_path: Path) -> None:
    outcome, sink = _run(ssh_conn, tmp_path, "ls -A | wc -l")
    assert outcome.failure is None
    assert sink.stdout.strip() == b"0"


def test_each_job_gets_a_fresh_folder_removed_afterwards(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    _, sink1 = _run(ssh_conn, tmp_path, "pwd\nls -A\ntouch marker")
    _, sink2 = _run(ssh_conn, tmp_path, "pwd\nls -A\ntouch marker")
    dir1, dir2 = sink1.stdout.decode().split()[0], sink2.stdout.decode().split()[0]
    assert dir1 != dir2
    assert sink2.stdout.decode().split() == [dir2]  # no marker left from the first job
    assert ssh_conn.run(f"test -e {dir1}").exit_code != 0


def test_artifacts_and_junit_come_back(ssh_conn: SshConnection, tmp_path: Path) -> None:
    script = (
        "mkdir -p out/deep\necho '<testsuite/>' > results.xml\n"
        "echo a > out/a.png\necho b > 'out/b c.png'\necho x > out/skip.txt\n"
        "echo d > out/deep/d.png"
    )
    outcome, sink = _run(
        ssh_conn,
        tmp_path,
        script,
        artifacts=("out/*.png", "out/**/*.png", "missing/*.bin", "none.txt"),
        junit="results.xml",
    )
    assert outcome.failure is None
    warnings = [line for line in sink.stderr.decode().splitlines() if "clore-run" in line]
    assert warnings == [  # the same words as the local backend's, and nothing else
        "clore-run: artifact 'missing/*.bin' matched no file",
        "clore-run: artifact 'none.txt' matched no file",
    ]
    got = sorted(p.relative_to(tmp_path / "artifacts").as_posix() for p in _files(tmp_path))
    assert got == ["out/a.png", "out/b c.png", "out/deep/d.png", "results.xml"]
    assert (tmp_path / "artifacts" / "results.xml").read_text() == "<testsuite/>\n"


def test_artifacts_are_fetched_for_a_failing_job(ssh_conn: SshConnection, tmp_path: Path) -> None:
    outcome, _ = _run(ssh_conn, tmp_path, "echo '<x/>' > r.xml\nexit 1", junit="r.xml")
    assert outcome.failure is FailureKind.TEST_FAILURE
    assert (tmp_path / "artifacts" / "r.xml").read_text() == "<x/>\n"


def test_symlink_artifacts_leading_out_are_refused(ssh_conn: SshConnection, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = (
        f"mkdir out\nln -s {outside} out/escape\nln -s /etc/passwd out/passwd\n"
        "ln -s ok.txt out/inside\necho ok > out/ok.txt"
    )
    outcome, sink = _run(ssh_conn, tmp_path, script, artifacts=("out",))
    assert outcome.failure is None
    art = tmp_path / "artifacts" / "out"
    assert sorted(p.name for p in art.iterdir()) == ["inside", "ok.txt"]
    assert (art / "inside").read_text() == "ok\n"
    assert "out/escape" in outcome.message and "out/passwd" in outcome.message
    assert b"refused" in sink.stderr
    assert list(outside.iterdir()) == []


def _files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]


def test_artifact_download_is_bounded_in_time(ssh_conn: SshConnection, tmp_path: Path) -> None:
    # A server can trickle an artifact forever; the fetch gives up and the job's verdict stands.
    sink = RecordingSink()
    script = "head -c 300000000 /dev/zero > big.bin"
    request = make_request(script, tmp_path / "artifacts", artifacts=("big.bin",))
    options = ExecOptions(kill_grace_s=0.5, drain_s=2.0, artifact_timeout_s=0.2)
    start = time.monotonic()
    outcome = run_job(ssh_conn, request, sink, threading.Event(), options)
    assert outcome.failure is None
    assert "artifacts" in outcome.message and "0.2 s" in outcome.message
    fetch_s = time.monotonic() - start
    assert fetch_s < 10
    assert ssh_conn.alive


@pytest.mark.parametrize("how", ["deadline", "stop"])
def test_channel_reader_gives_up_on_a_silent_server(ssh_conn: SshConnection, how: str) -> None:
    chan = ssh_conn.exec("sleep 30")
    try:
        if how == "deadline":
            reader = ChannelReader(chan, deadline=time.monotonic() + 0.3)
        else:
            reader = ChannelReader(chan, stop=lambda: True)
        start = time.monotonic()
        with pytest.raises(ReadStopped):
            reader.read(512)
        assert time.monotonic() - start < 3
    finally:
        chan.close()


def test_channel_reader_drain_keeps_stderr_that_comes_after_stdout_ends(
    ssh_conn: SshConnection,
) -> None:
    """stderr is a stream of its own: the artifact collector's "matched no file" notes can
    reach us after tarfile has read the archive's end (the SSH artifact test then saw no
    warning, now and then). The remote command writes its stderr late on purpose."""
    chan = ssh_conn.exec("printf x; sleep 0.3; printf 'late\\n' >&2")
    try:
        reader = ChannelReader(chan)
        assert reader.read(1) == b"x"
        reader.drain(10)
        assert reader.stderr == b"late\n"
    finally:
        chan.close()


def test_server_text_in_a_failure_message_stays_on_one_line(
    own_conn: SshConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The message ends up printed after `[job] ERROR: ` in the Actions log, where a line
    # starting with `::` is a workflow command: a server's stderr must not start one.
    from runner.backends.ssh import exec as ssh_exec

    hostile = (
        "cat >/dev/null; printf 'no\\n::add-mask::x\\r::error::y\\033[2J\\302\\205z' >&2; exit 1"
    )
    monkeypatch.setattr(ssh_exec, "_PREPARE", hostile)
    outcome, _ = _run(own_conn, tmp_path, "true")
    assert outcome.failure is FailureKind.SSH_FAILED
    assert "::add-mask::x" in outcome.message  # still said, just not as a line of its own
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", outcome.message), outcome.message


@pytest.mark.parametrize(
    "hostile",
    [
        "cat >/dev/null; sleep 30",  # reads the upload, then holds the channel open
        "sleep 30",  # does not even read it: our sends block once the window is full
    ],
)
def test_workspace_upload_is_bounded_in_time(
    own_conn: SshConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile: str
) -> None:
    from runner.backends.ssh import exec as ssh_exec

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(bytes(8 << 20))  # more than the channel window
    monkeypatch.setattr(ssh_exec, "_PREPARE", hostile)
    sink = RecordingSink()
    request = make_request("true", tmp_path / "art", workspace=ws, files=("big.bin",))
    options = ExecOptions(kill_grace_s=0.5, drain_s=1.0, upload_timeout_s=1.0)
    start = time.monotonic()
    outcome = run_job(own_conn, request, sink, threading.Event(), options)
    assert time.monotonic() - start < 6
    assert outcome.failure is FailureKind.SSH_FAILED
    assert "upload" in outcome.message


def test_a_server_answering_no_usable_folder_is_refused(
    own_conn: SshConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.backends.ssh import exec as ssh_exec

    # 50 MB of NULs instead of a folder name: neither kept in memory nor used.
    monkeypatch.setattr(ssh_exec, "_PREPARE", "cat >/dev/null; head -c 50000000 /dev/zero")
    outcome, _ = _run(own_conn, tmp_path, "true")
    assert outcome.failure is FailureKind.SSH_FAILED
    assert "folder" in outcome.message and len(outcome.message) < 500


def test_run_keeps_a_bounded_part_of_a_flood(ssh_conn: SshConnection) -> None:
    result = ssh_conn.run("head -c 20000000 /dev/zero; head -c 20000000 /dev/zero >&2")
    assert result.exit_code == 0
    assert 0 < len(result.stdout) <= 1 << 20
    assert 0 < len(result.stderr) <= 1 << 20


def test_cancel_during_the_upload_is_a_cancel_not_an_ssh_failure(
    own_conn: SshConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.backends.ssh import exec as ssh_exec

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(bytes(8 << 20))  # more than the channel window
    monkeypatch.setattr(ssh_exec, "_PREPARE", "sleep 30")  # the upload blocks
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    request = make_request("true", tmp_path / "art", workspace=ws, files=("big.bin",))
    start = time.monotonic()
    outcome = run_job(own_conn, request, RecordingSink(), cancel, FAST_KILL)
    assert time.monotonic() - start < 5
    # SSH_FAILED would be retried as an infrastructure failure: a cancel must not be.
    assert outcome.failure is FailureKind.CANCELLED, outcome.message


class _BrokenSink(RecordingSink):
    """A log that fails (a full disk) once the job printed `boom`."""

    def write(self, stream: str, data: bytes) -> None:  # type: ignore[override]
        super().write(stream, data)  # type: ignore[arg-type]
        if b"boom" in self.stdout:
            raise OSError(28, "No space left on device")


def test_a_failing_log_still_kills_the_remote_job(
    sshd_server: SshServer, ssh_key: ClientKey, tmp_path: Path
) -> None:
    # A connection of its own: the session's shared one once died under this test in a full
    # run (EBADF in paramiko's reader, not reproduced since), failing the check, not the kill.
    conn = connect(Endpoint("127.0.0.1", sshd_server.port), ssh_key, HostKeyStore())
    try:
        sink = _BrokenSink()
        request = make_request("sleep 300 &\necho bg=$!\nsleep 0.3\necho boom\nwait", tmp_path)
        with pytest.raises(OSError, match="No space"):
            run_job(conn, request, sink, threading.Event(), FAST_KILL)
        pid = int(re.search(rb"bg=(\d+)", sink.stdout).group(1))  # type: ignore[union-attr]
        assert _gone(conn, pid)  # a job left running would share the host with the next one
    finally:
        conn.close()


def test_a_script_a_signal_ends_leaves_no_shell_noise_in_its_output(
    ssh_conn: SshConnection, tmp_path: Path
) -> None:
    # `exec setsid -w` printed "setsid: child N did not exit normally: Success", and a plain
    # shell would print "Killed ..." into the job's stderr.
    outcome, sink = _run(ssh_conn, tmp_path, "echo out; echo err >&2; kill -KILL $$")
    assert outcome.exit_code == 137
    assert outcome.message == "exit code 137 (killed by SIGKILL?)"
    assert (bytes(sink.stdout), bytes(sink.stderr)) == (b"out\n", b"err\n")
