"""`clore-run submit/status/cancel/serve` as a user runs them: exit codes and what they print."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runner.serve.client import key_path
from tests.processes import marked_env
from tests.serve.harness import _ENTRY, FINAL, TOKEN, cli, thread_server

# Each test starts a real `serve` and the CLI as processes: the slow lane.
pytestmark = pytest.mark.slow

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
    for command in (["status"], ["jobs"], ["logs", "s1.a"]):
        down = cli(*command, "--server", f"http://127.0.0.1:{port}", env=AUTH)
        assert down.returncode == 3
        # In words, never requests' nested text (HTTPConnectionPool(...): Max retries ...).
        said = f"clore-run: cannot reach http://127.0.0.1:{port}: connection refused"
        assert down.stderr.startswith(said), command
        assert "\nhint: is `clore-run serve` running there? Check --server" in down.stderr


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


def test_jobs_lists_the_queue_and_logs_print_and_follow(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(
        "jobs:\n"
        "  quick: {run: 'printf \"one\\\\n\\\\033]0;pwned\\\\007two\\\\n\"'}\n"
        f"  hold:\n    run: echo waiting; while [ ! -e {gate} ]; do sleep 0.02; done; echo done\n"
    )
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        assert cli("submit", str(pipeline), "--server", url, env=AUTH).returncode == 0
        srv.api.wait_status("s1.quick", FINAL)
        srv.api.wait_status("s1.hold", {"running"})
        listed = cli("jobs", "--server", url, env=AUTH)
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split() == ["ID", "STATUS", "NAME", "TRIES", "COST", "SUBMITTED", "REASON"]
        assert [r.split()[:2] for r in rows] == [["s1.quick", "passed"], ["s1.hold", "running"]]
        running = cli("jobs", "--status", "running", "--server", url, env=AUTH)
        assert [r.split()[0] for r in running.stdout.splitlines()[1:]] == ["s1.hold"]
        typo = cli("jobs", "--status", "runing", "--server", url, env=AUTH)
        assert typo.returncode == 2 and "did you mean 'running'?" in typo.stderr
        shown = cli("status", "s1.hold", "--server", url, env=AUTH)
        assert "attempt 1 on localhost: running" in shown.stdout  # its server, not "-"

        log = cli("logs", "s1.quick", "--server", url, env=AUTH)
        assert log.returncode == 0
        assert "one\n" in log.stdout and "two\n" in log.stdout
        assert "\x1b" not in log.stdout and "\x07" not in log.stdout  # no title set, no bell
        raw = cli("logs", "s1.quick", "--raw", "--server", url, env=AUTH)
        assert "\x1b]0;pwned\x07two" in raw.stdout

        follower = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, "logs", "s1.hold", "-f", "--server", url],
            stdout=subprocess.PIPE,
            text=True,
            env=marked_env(AUTH),
        )
        assert follower.stdout is not None
        try:
            while "waiting" not in follower.stdout.readline():  # the job is still running
                pass
            gate.touch()
            rest = follower.stdout.read()  # ends when the job settles
            assert follower.wait(timeout=30) == 0
        finally:
            follower.kill()
            follower.stdout.close()
        assert "done" in rest
        missing = cli("logs", "s9.none", "--server", url, env=AUTH)
        assert missing.returncode == 2 and "404" in missing.stderr


def test_problems_from_the_server_are_spelt_as_validate_spells_them(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        reply = srv.api.request("POST", "/jobs", json={"ruun": "echo", "gpu": {"cout": 2}})
        assert reply.status_code == 422
        hints = {tuple(p["loc"]): p.get("hint") for p in reply.json()["detail"]}
        assert hints[("body", "ruun")] == "did you mean 'run'?"
        assert hints[("body", "gpu", "cout")] == "did you mean 'count'?"
        bad = tmp_path / "bad.yml"
        bad.write_text("jobs:\n  a:\n    run: x\n    needs: [nope]\n")
        refused = cli("submit", str(bad), "--server", srv.api.url, env=AUTH)
        assert f"{bad}:4:13: jobs.a.needs[0]: unknown job 'nope'" in refused.stderr
    assert key_path(["body", "needs", 0]) == "needs[0]"
    assert key_path(["query", "after", 1]) == "after[1]"


def test_a_submitted_pipeline_gets_the_yaml_warnings_validate_gives(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yml"
    pipeline.write_text("jobs:\n  a: {run: echo, env: {PY: 3.10}}\n")
    with thread_server(tmp_path) as srv:
        submitted = cli("submit", str(pipeline), "--server", srv.api.url, env=AUTH)
    assert submitted.returncode == 0
    assert (
        "warning: line 2, column 28: jobs.a.env.PY: unquoted 3.10 is read as the number 3.1 "
        '(quote it: "3.10")' in submitted.stderr
    )
