"""`clore-run serve` as a subprocess, killed and restarted on the same --db."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.processes import alive
from tests.serve.harness import FINAL, TOKEN, cli, start_serve, wait_until

# Each test starts and kills real `serve` processes: the slow lane.
pytestmark = pytest.mark.slow


def pipeline(tmp: Path) -> str:
    """`long` notes each start and runs until a gate file exists; `other` queues behind it."""
    return f"""
jobs:
  long:
    priority: urgent
    run: |
      echo $$ >> {tmp}/long.starts
      while [ ! -e {tmp}/gate ]; do sleep 0.02; done
  other:
    run: echo x >> {tmp}/other.runs
  after:
    needs: long
    run: echo x >> {tmp}/after.runs
"""


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_kill_9_mid_run_loses_nothing_and_runs_nothing_twice_silently(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    first = start_serve(db, "--concurrency", "1")
    try:
        ids = first.api.submit(pipeline(tmp_path))
        first.api.wait_status("s1.long", {"running"})
        (orphan,) = wait_until(lambda: lines(tmp_path / "long.starts"), what="long to start")
    finally:
        first.kill()
    assert alive(int(orphan))  # the local job outlived its server: it must not go on

    second = start_serve(db, "--concurrency", "1")
    try:
        long = second.api.wait_status("s1.long", {"running"})
        assert not alive(int(orphan))  # killed by the restart before anything was requeued
        lost = long["attempt_list"][0]
        assert lost["failure"] == "server_lost"
        assert lost["message"].startswith("lost: the queue server stopped while it ran")
        assert "killed at restart" in lost["message"]
        (tmp_path / "gate").touch()
        for job_id in ids:
            assert second.api.wait_status(job_id, FINAL)["status"] == "passed"
        assert len(lines(tmp_path / "long.starts")) == 2  # the lost attempt, then one retry
        assert len(lines(tmp_path / "other.runs")) == 1
        assert len(lines(tmp_path / "after.runs")) == 1
        listed = second.api.get("/jobs").json()["jobs"]
        assert [j["id"] for j in listed] == ids
        assert [len(second.api.job(i)["attempt_list"]) for i in ids] == [2, 1, 1]
    finally:
        assert second.terminate() == 0


def test_sigterm_hands_running_jobs_to_the_next_start(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    first = start_serve(db)
    first.api.submit(pipeline(tmp_path))
    first.api.wait_status("s1.long", {"running"})
    assert first.terminate() == 0

    second = start_serve(db)
    try:
        (tmp_path / "gate").touch()
        job = second.api.wait_status("s1.long", FINAL)
        assert job["status"] == "passed"
        handed = job["attempt_list"][0]
        assert handed["message"] == "interrupted: the queue server shut down"
        assert job["attempt_list"][1]["failure"] is None
        # `after` starts only once `long` has passed: wait for it too before counting its runs.
        assert second.api.wait_status("s1.after", FINAL)["status"] == "passed"
        assert len(lines(tmp_path / "after.runs")) == 1
    finally:
        second.terminate()


def test_sighup_hands_running_jobs_over_and_leaves_no_process(tmp_path: Path) -> None:
    # A closed terminal sends SIGHUP: the server must stop as cleanly as on SIGTERM, not die
    # with its local jobs running on (or rentals billing) until some later start.
    db = tmp_path / "queue.db"
    first = start_serve(db)
    first.api.submit(pipeline(tmp_path))
    first.api.wait_status("s1.long", {"running"})
    (pid,) = wait_until(lambda: lines(tmp_path / "long.starts"), what="long to start")
    assert first.terminate(signal.SIGHUP) == 0
    assert not alive(int(pid))

    second = start_serve(db)
    try:
        (tmp_path / "gate").touch()
        job = second.api.wait_status("s1.long", FINAL)
        assert job["attempt_list"][0]["message"] == "interrupted: the queue server shut down"
    finally:
        second.terminate()


def test_a_second_server_on_the_same_db_is_refused(tmp_path: Path) -> None:
    # It would take the first one's running attempts for a dead server's: kill their
    # processes, record them lost and run them again, while both schedule the same queue.
    db = tmp_path / "queue.db"
    first = start_serve(db)
    try:
        first.api.submit(pipeline(tmp_path))
        first.api.wait_status("s1.long", {"running"})
        wait_until(lambda: lines(tmp_path / "long.starts"), what="long to start")
        second = cli("serve", "--port", "0", "--db", str(db), env={"CLORE_RUN_TOKEN": TOKEN})
        assert second.returncode == 2
        assert "another clore-run serve" in second.stderr
        (tmp_path / "gate").touch()
        job = first.api.wait_status("s1.long", FINAL)
        assert job["status"] == "passed" and len(job["attempt_list"]) == 1
        assert len(lines(tmp_path / "long.starts")) == 1
    finally:
        assert first.terminate() == 0
