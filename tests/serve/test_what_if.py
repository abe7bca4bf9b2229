"""`clore-run warmth`: a queue's own history replayed through serve's core at each keep-warm."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.cli import warmth
from runner.errors import UsageError
from tests.fakes.fake_clock import FakeClock
from tests.serve.harness import FINAL, thread_server


def _app() -> typer.Typer:
    app = typer.Typer()
    warmth.register(app)
    app.command("other")(lambda: None)  # two commands: typer keeps the name
    return app


@pytest.mark.slow  # a process: the CLI, or serve and its jobs
def test_the_table_replays_the_queue_at_each_keep_warm(tmp_path: Path) -> None:
    clock = FakeClock(start_unix=time.time() - 7200)  # two hours ago, ten minutes apart
    with thread_server(tmp_path, capacity=1, clock=clock) as srv:
        for n in range(4):
            (job_id,) = srv.api.submit(f"jobs:\n  j{n}:\n    run: echo {n}\n")
            assert srv.api.wait_status(job_id, FINAL, timeout=30)["status"] == "passed"
            clock.advance(600)
            srv.service.wake()
    db = str(tmp_path / "queue.db")
    args = ["warmth", "--db", db, "--days", "1", "--boot-seconds", "30", "--json"]
    reply = CliRunner().invoke(_app(), [*args, "--warm", "4090:1", "--idle-budget", "1"])
    assert reply.exit_code == 0, reply.output
    rows = json.loads(reply.stdout)
    assert [r["label"] for r in rows][:4] == [f"keep-warm {m} min" for m in (0, 5, 15, 60)]
    assert rows[-1]["label"].startswith("as asked: ")
    assert all(r["jobs"] == 4 for r in rows)
    cold, warm60 = rows[0], rows[3]
    # Ten minutes apart: cold, each waits a boot; kept 15 minutes or more, only the first.
    assert cold["orders"] == 4 and cold["mean_wait_s"] == pytest.approx(30.0)
    assert rows[2]["orders"] == warm60["orders"] == 1 and warm60["warm_starts"] == 3
    assert rows[1]["orders"] == 4  # five minutes is too short for them
    assert warm60["idle_usd"] == 0.0  # the local backend's places are free
    text = CliRunner().invoke(_app(), ["warmth", "--db", db, "--boot-seconds", "30"]).stdout
    assert "4 jobs of the last 7 days; a boot 30 s (assumed)" in text and "keep-warm 15 min" in text


def test_a_missing_database_is_a_usage_error(tmp_path: Path) -> None:
    reply = CliRunner().invoke(_app(), ["warmth", "--db", str(tmp_path / "none.db")])
    assert isinstance(reply.exception, UsageError) and "no such queue database" in str(
        reply.exception
    )
