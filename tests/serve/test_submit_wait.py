"""`clore-run submit --wait` against a real `clore-run serve` process on loopback: the status
lines, the reports `run` writes (read by junitparser and check-jsonschema), run's exit codes,
Ctrl-C cancelling the submission's jobs, and the bad inputs that must be refused with a fix."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import junitparser
import pytest

from tests.processes import marked_env
from tests.report.test_summary_schema import SCHEMA, _check_jsonschema
from tests.serve.harness import _ENTRY, TOKEN, ServeProcess, cli, start_serve, stop_and_show

pytestmark = pytest.mark.slow

MIXED = """name: mixed
jobs:
  build:
    run: |
      echo built
      echo "::error::from the job"
  test:
    needs: build
    run: echo testing; exit 1
  docs:
    run: echo docs
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    srv = start_serve(tmp_path / "queue.db", "--data-dir", str(tmp_path / "data"))
    try:
        yield srv
    finally:
        stop_and_show([srv])


def submit(
    srv: ServeProcess, tmp_path: Path, text: str, *args: str, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(text)
    env = {"CLORE_RUN_TOKEN": token, "GITHUB_ACTIONS": ""}
    return cli("submit", str(pipeline), "--server", srv.api.url, "--poll", "0.05", *args, env=env)


def test_a_submission_is_followed_and_reported_as_run_reports(
    server: ServeProcess, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = submit(server, tmp_path, MIXED, "--wait", "--out", str(out), "--trust", "team-ml")
    assert done.returncode == 1, done.stderr  # a job failed: as `run` exits
    said = done.stdout.splitlines()
    assert said[0] == f"submitted s1 to {server.api.url}: 3 job(s)"
    assert "build: passed ($0.0000)" in said and "docs: passed ($0.0000)" in said
    assert "test: failed ($0.0000): exit code 1" in said
    assert said[-2].startswith("failed: $0.00; reports in")
    assert said[-1] == "clore-run: exit 1: a job failed"  # as `run` ends, in the same words
    # the reports of `run`, read by the consumers a workflow uses
    xml = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"build", "test", "docs"} and suites["test"].failures == 1
    checked = _check_jsonschema(SCHEMA, out / "summary.json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["run_id"] == "s1"
    jobs = {j["id"]: j for j in summary["jobs"]}
    assert (jobs["build"]["warm_server"], jobs["build"]["server_wait_s"]) == (False, 0.0)
    assert "testing" in "".join(jobs["test"]["log_tail"])
    assert b"built" in (out / "logs" / "build.log").read_bytes()
    assert (out / "summary.md").exists() and (out / "timeline.svg").exists()
    assert server.api.job("s1.build")["trust"] == "team-ml"


def test_logs_are_shown_made_inert_and_a_pass_exits_0(server: ServeProcess, tmp_path: Path) -> None:
    text = (
        'jobs:\n  one:\n    run: |\n      echo "::error::gotcha"\n'
        '      printf "\\033]0;title\\007x\\n"\n'
    )
    done = submit(server, tmp_path, text, "--wait", "--logs", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("[one] ")]
    assert any("gotcha" in line for line in lines) and any(line == "[one] x" for line in lines)
    assert not any("::error::" in line or "\x1b" in line for line in done.stdout.splitlines())


def test_ctrl_c_cancels_the_submissions_jobs_and_exits_130(
    server: ServeProcess, tmp_path: Path
) -> None:
    pipeline = tmp_path / "slow.yml"
    pipeline.write_text(
        "jobs:\n  slow:\n    run: sleep 600\n  after:\n    needs: slow\n    run: echo after\n"
    )
    out = tmp_path / "out"
    args = ["submit", str(pipeline), "--server", server.api.url, "--wait", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENTRY, *args, "--poll", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=marked_env({"CLORE_RUN_TOKEN": TOKEN, "GITHUB_ACTIONS": ""}),
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # blocks until the job is said to run
            if line.startswith("slow: running"):
                break
        else:
            pytest.fail(f"never ran: {proc.stderr.read() if proc.stderr else ''}")
        proc.send_signal(signal.SIGINT)
        rest, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, errors
    assert "interrupted by SIGINT: cancelling the submission's jobs" in rest
    assert {server.api.status("s1.slow"), server.api.status("s1.after")} == {"cancelled"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert [j["status"] for j in summary["jobs"]] == ["cancelled", "cancelled"]


@pytest.mark.parametrize("value", ["../etc", "<b>x</b>", "a\x1b[31mb"])
def test_a_trust_that_is_not_a_name_is_refused_before_anything_is_queued(
    server: ServeProcess, tmp_path: Path, value: str
) -> None:
    done = submit(server, tmp_path, MIXED, "--wait", "--trust", value)
    assert done.returncode == 2
    assert "--trust: a trust domain is a name" in done.stderr and "--trust team-ml" in done.stderr
    assert value not in done.stderr and value not in done.stdout  # never shown back
    assert server.api.get("/jobs").json()["jobs"] == []


def test_a_malformed_pipeline_is_refused_where_it_is_wrong(
    server: ServeProcess, tmp_path: Path
) -> None:
    done = submit(server, tmp_path, "jobs:\n  a:\n    runn: echo\n", "--wait")
    assert done.returncode == 2
    assert f"{tmp_path / 'pipeline.yml'}:3:5" in done.stderr and "run" in done.stderr
    assert server.api.get("/jobs").json()["jobs"] == []


def test_a_bad_token_says_which_token_to_give(server: ServeProcess, tmp_path: Path) -> None:
    done = submit(server, tmp_path, MIXED, "--wait", token="not-the-servers-token")
    assert done.returncode == 2, done.stderr
    assert "refused the token" in done.stderr and "CLORE_RUN_TOKEN" in done.stderr
    assert "not-the-servers-token" not in done.stderr


def test_an_unreachable_server_is_an_infrastructure_error_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(MIXED)
    done = cli("submit", str(pipeline), "--server", url, "--wait", env={"CLORE_RUN_TOKEN": TOKEN})
    assert done.returncode == 3
    assert f"clore-run: cannot reach {url}" in done.stderr and "--server" in done.stderr


def test_out_and_logs_need_wait(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yml"
    pipeline.write_text(MIXED)
    done = cli("submit", str(pipeline), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "add --wait" in done.stderr


def test_a_serve_restart_while_waiting_loses_nothing(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    gate = tmp_path / "gate"
    pipeline = tmp_path / "gated.yml"
    pipeline.write_text(f"jobs:\n  gated:\n    run: while [ ! -e {gate} ]; do sleep 0.02; done\n")
    db, data = str(tmp_path / "queue.db"), str(tmp_path / "data")
    first = start_serve(db, "--port", port, "--data-dir", data)
    servers = [first]
    args = ["submit", str(pipeline), "--server", first.api.url, "--wait", "--poll", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENTRY, *args, "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=marked_env({"CLORE_RUN_TOKEN": TOKEN, "GITHUB_ACTIONS": ""}),
    )
    assert proc.stdout is not None
    try:
        said = []
        for line in proc.stdout:  # blocks until the job runs, then until the loss is noticed
            said.append(line)
            if line.startswith("gated: running"):
                first.terminate()  # hands the running job back as queued
            if "trying again" in line:
                break
        servers.append(start_serve(db, "--port", port, "--data-dir", data))
        gate.touch()
        rest, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_and_show(servers)
    assert proc.returncode == 0, "".join(said) + rest + errors
    assert f"cannot reach {first.api.url}" in "".join(said)
    assert "the server answers again" in rest and "gated: passed" in rest


def test_a_jobs_own_junit_report_is_merged_as_runs_is(server: ServeProcess, tmp_path: Path) -> None:
    suite = (
        '<testsuite name="gpu" tests="2" failures="1">'
        '<testcase classname="tests.test_gpu" name="test_ok"/>'
        '<testcase classname="tests.test_gpu" name="test_bad"><failure message="boom"/>'
        "</testcase></testsuite>"
    )
    text = (
        "jobs:\n  gpu:\n    junit: reports/gpu.xml\n    run: |\n"
        f"      mkdir -p reports && echo '{suite}' > reports/gpu.xml\n"
    )
    out = tmp_path / "out"
    done = submit(server, tmp_path, text, "--wait", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr  # the job passed: as `run` exits
    xml = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    cases = {(c.classname, c.name): c for s in xml for c in s}
    assert {("gpu.tests.test_gpu", "test_bad"), ("gpu.tests.test_gpu", "test_ok")} <= set(cases)
    assert (out / "artifacts" / "gpu" / "reports" / "gpu.xml").is_file()


def test_a_serve_restart_mid_log_shows_every_line_once(tmp_path: Path) -> None:
    """`--logs` across a real serve stopped and started again: the followed log is picked up
    where it was cut off; what is shown is the server's log, line for line, once (the job's
    first attempt, interrupted by the stop, and the retry the restarted serve ran)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    gate = tmp_path / "gate"
    pipeline = tmp_path / "gated.yml"
    pipeline.write_text(
        "jobs:\n  gated:\n    run: |\n      echo first-$CLORE_RUN_ATTEMPT\n"
        f"      while [ ! -e {gate} ]; do sleep 0.02; done\n      echo second\n"
    )
    db, data, out = str(tmp_path / "queue.db"), str(tmp_path / "data"), tmp_path / "out"
    first = start_serve(db, "--port", port, "--data-dir", data)
    servers = [first]
    args = ["submit", str(pipeline), "--server", first.api.url, "--wait", "--logs"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENTRY, *args, "--poll", "0.05", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=marked_env({"CLORE_RUN_TOKEN": TOKEN, "GITHUB_ACTIONS": ""}),
    )
    assert proc.stdout is not None
    said: list[str] = []
    try:
        for line in proc.stdout:  # each step waits for the line that says it is time
            said.append(line)
            if line.startswith("[gated] first-1"):
                first.terminate()  # hands the running job back as queued
            elif len(servers) == 1 and ("lost the server" in line or "log cut off" in line):
                servers.append(start_serve(db, "--port", port, "--data-dir", data))
            elif line.startswith("[gated] first-2"):
                gate.touch()
        proc.wait(timeout=60)
        errors = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_and_show(servers)
    text = "".join(said)
    assert proc.returncode == 0, text + errors
    assert "lost the server" in text and "the server answers again" in text
    assert "[gated] log picked up again at byte" in text
    shown = [s[len("[gated] ") :].rstrip("\n") for s in said if s.startswith("[gated] ")]
    shown = [s for s in shown if not s.startswith(("log cut off", "log picked up again"))]
    logged = (out / "logs" / "gated.log").read_text().splitlines()
    assert shown == logged, text
    assert {"first-1", "first-2", "second"} <= set(logged)
