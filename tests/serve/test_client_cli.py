"""`clore-run submit/status/cancel/serve` as a user runs them: exit codes and what they print."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.serve.harness import FINAL, TOKEN, cli, thread_server

AUTH = {"CLORE_RUN_TOKEN": TOKEN}


def test_submit_status_cancel(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(
        f"concurrency: 9\njobs:\n  hold:\n    run: while [ ! -e {gate} ]; do sleep 0.02; done\n"
    )
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        submitted = cli("submit", str(pipeline), "--server", url, env=AUTH)
        assert (submitted.returncode, submitted.stdout) == (0, "s1.hold\n")
        assert "`concurrency` is ignored" in submitted.stderr
        srv.api.wait_status("s1.hold", {"running"})
        shown = cli("status", "s1.hold", "--server", url, env=AUTH)
        assert shown.returncode == 0 and shown.stdout.startswith("s1.hold: running")
        stats = cli("status", "--server", url, env=AUTH)
        assert stats.returncode == 0 and "jobs: 1 running" in stats.stdout
        cancelled = cli("cancel", "s1.hold", "--server", url, env=AUTH)
        assert (cancelled.returncode, cancelled.stdout) == (0, "s1.hold: cancelling\n")
        assert srv.api.wait_status("s1.hold", FINAL)["status"] == "cancelled"
        again = cli("cancel", "s1.hold", "--server", url, env=AUTH)
        assert again.returncode == 2 and "already cancelled" in again.stderr


def test_client_errors_map_to_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("jobs:\n  a:\n    run: x\n    needs: [b]\n")
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        refused = cli("submit", str(bad), "--server", url, env=AUTH)
        assert refused.returncode == 2
        assert f"{bad}:4:" in refused.stderr and "unknown job 'b'" in refused.stderr
        wrong_token = cli("status", "--server", url, env={"CLORE_RUN_TOKEN": "x" * 20})
        assert wrong_token.returncode == 2 and "401" in wrong_token.stderr
        unknown = cli("status", "s9.none", "--server", url, env=AUTH)
        assert unknown.returncode == 2 and "404" in unknown.stderr
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = cli("status", "--server", f"http://127.0.0.1:{port}", env=AUTH)
    assert down.returncode == 3 and "cannot reach" in down.stderr


def test_serve_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    result = cli(
        "serve", "--port", "0", "--db", str(tmp_path / "q.db"), env={"CLORE_RUN_TOKEN": ""}
    )
    assert result.returncode == 2
    assert (
        "CLORE_RUN_TOKEN is not set" in result.stderr and "secrets.token_urlsafe" in result.stderr
    )
    short = cli("serve", "--db", str(tmp_path / "q.db"), env={"CLORE_RUN_TOKEN": "short"})
    assert short.returncode == 2 and "shorter than 16 characters" in short.stderr
    assert not (tmp_path / "q.db").exists()  # nothing was started
