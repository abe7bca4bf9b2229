"""A cancel asked for a job whose `serve` instance is stopping cleanly (SIGTERM: its claims
stopped, its HTTP API closed, its running job being killed for the hand-over) is carried out, not
lost: the hand-over settles the job cancelled instead of giving it back to the queue, where
another instance would claim it and run it again."""

from __future__ import annotations

import signal
from pathlib import Path

from runner.core.model import Attempt, FailureKind, Job
from runner.stores.queue import open_queue, shared
from runner.stores.queue.postgres import CANCELLED_IN_HAND_OVER
from tests.serve.harness import _ENTRY, FINAL, start_serves, stop_and_show, wait_until
from tests.serve.test_fleet import lines, marked, serve_options

# The job's SIGTERM trap waits for the test's cancel, so the kill grace must outlast that wait
# (on a loaded machine) and still end inside the hand-over's 5 s.
_SLOW_KILL = "import runner.backends.local as local; local.KILL_GRACE_S = 4.5\n"


def stubborn_job(tmp: Path) -> str:
    """`long` notes each start and runs until `gate`; on SIGTERM it notes `term` and ends only
    once `asked` exists (the test has cancelled it by then)."""
    return f"""
jobs:
  long:
    run: |
      trap 'echo > {tmp}/term; while [ ! -e {tmp}/asked ]; do sleep 0.02; done; exit 1' TERM
      echo $$ >> {tmp}/long.starts
      while [ ! -e {tmp}/gate ]; do sleep 0.02; done
"""


def test_a_cancel_asked_while_the_holder_stops_cleanly_is_carried_out(
    tmp_path: Path, pg_url: str
) -> None:
    """Without the hand-over honouring the request, the job went back to the queue, the other
    instance claimed it and started it a second time before its own pass of the cancel
    requests killed it (two starts, two attempts): this test then fails."""
    servers = start_serves(2, pg_url, *serve_options(tmp_path), entry=_SLOW_KILL + _ENTRY)
    try:
        (job_id,) = servers[0].api.submit(stubborn_job(tmp_path))
        holder = servers[0].api.wait_status(job_id, {"running"}, 30)["attempt_list"][0]["instance"]
        stopping = next(s for s in servers if s.instance == holder)
        other = next(s for s in servers if s is not stopping)
        wait_until(lambda: lines(tmp_path / "long.starts"), what="long to start")
        stopping.proc.send_signal(signal.SIGTERM)
        wait_until((tmp_path / "term").exists, 30, "the hand-over to kill the job")
        asked = other.api.request("DELETE", f"/jobs/{job_id}")
        assert asked.status_code == 202 and asked.json()["status"] == "cancelling"  # still held
        (tmp_path / "asked").touch()
        assert stopping.proc.wait(timeout=30) == 0
        done = other.api.wait_status(job_id, FINAL, 30)
        assert (done["status"], done["reason"]) == ("cancelled", "cancelled by request")
        (attempt,) = done["attempt_list"]  # not run again
        assert attempt["instance"] == stopping.instance
        # killed for the cancel, not lost with its server (it was fine)
        assert (attempt["failure"], attempt["message"]) == ("cancelled", CANCELLED_IN_HAND_OVER)
        assert len(lines(tmp_path / "long.starts")) == 1
    finally:
        (tmp_path / "asked").touch()
        (tmp_path / "gate").touch()
        stop_and_show(servers)
    assert marked({s.instance for s in servers}) == []


def test_a_held_queued_job_asked_to_cancel_is_cancelled_when_its_holder_stops(
    pg_url: str,
) -> None:
    """A job the stopping instance held but was not running (a retry waiting for its time) is
    cancelled by end_instance, not given back to everyone with the request still on it; and a
    running one it hands over (requeue) after the request is cancelled too, its attempt ended
    for the cancel. One handed over without a request goes back to everyone, its attempt lost."""
    store = shared(open_queue(pg_url))
    other = shared(open_queue(pg_url))
    assert store is not None and other is not None
    try:
        jobs = [Job(id=f"s1.j{i}", name=f"j{i}", run="true") for i in range(3)]
        store.submit("p", "p", lambda n: jobs, 1.0)
        store.join("a", 1, "local", 1.0, 60.0)
        store.join("b", 2, "local", 1.0, 60.0)
        assert [u.job.id for u in store.claim("a", 3, 2.0)] == ["s1.j0", "s1.j1", "s1.j2"]
        for job in jobs:
            store.fenced_start_attempt(job.id, 1, "a", 2.0)
        store.fenced_requeue("s1.j1", 100.0, 1, 0, "a")  # j1 waits for its retry, still a's
        assert other.cancel_elsewhere("s1.j0", 3.0) == "cancelling"
        assert other.cancel_elsewhere("s1.j1", 3.0) == "cancelling"
        lost = Attempt(1, 2.0, 4.0, None, FailureKind.SERVER_LOST, "interrupted")
        store.fenced_end_attempt("s1.j0", lost, "a", requeue=True)  # a's hand-over
        store.fenced_end_attempt("s1.j2", lost, "a", requeue=True)
        store.end_instance("a", 5.0)
        for job_id in ("s1.j0", "s1.j1"):
            found = other.job(job_id)
            assert found is not None
            row = found[0]
            assert (row.status, row.reason) == ("cancelled", "cancelled by request"), job_id
        ended = [(a["failure"], a["message"]) for a in other.attempts("s1.j0")]
        assert ended == [("cancelled", CANCELLED_IN_HAND_OVER)]
        handed = [(a["failure"], a["message"]) for a in other.attempts("s1.j2")]
        assert handed == [("server_lost", "interrupted")]
        assert [u.job.id for u in other.claim("b", 5, 200.0)] == ["s1.j2"]  # nothing else
    finally:
        store.close()
        other.close()
