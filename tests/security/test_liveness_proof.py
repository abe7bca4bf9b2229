"""A holder is "provably dead" only when its host, boot id, pid namespace, time namespace and
start time are all readable and prove it. A run alive in another container sharing the ledger,
in another time namespace, or behind a /proc mounted `hidepid=2` is not dead: cleanup leaves it
alone and says why (with a coordinator, its lease's expiry decides)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner import liveness
from runner.stores.ledger.sqlite import SqliteLedger
from tests.backends.clore.test_cleanup import app_for, rent
from tests.fakes.clore_api import FakeClore


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_process_hidden_by_hidepid_is_not_dead(
    child: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = liveness.current()
    assert here is not None
    started = liveness._started(child.pid)
    assert started is not None
    holder = dataclasses.replace(here, pid=child.pid, started=started)
    # /proc as hidepid=2 shows it to another user: our own entries, none of the child's.
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    shutil.copy("/proc/sys/kernel/random/boot_id", proc / "sys/kernel/random/boot_id")
    monkeypatch.setattr(liveness, "_PROC", proc)
    assert liveness.state(holder) is None  # unknown: wait for the lease, never "dead"


def test_the_time_namespace_is_part_of_where_a_pid_names_a_process() -> None:
    here = liveness.current()
    assert here is not None
    if not Path("/proc/self/ns/time").exists():
        pytest.skip("this kernel has no time namespaces")
    assert os.readlink("/proc/self/ns/time") in here.where
    other = dataclasses.replace(here, where=here.where.rsplit(" ", 1)[0] + " time:[1]")
    assert liveness.state(other) is None


def test_cleanup_leaves_alone_a_run_alive_in_another_container(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock)
    _, order = rent(fake_clore, ledger, 88028, "train")
    here = liveness.current()
    assert here is not None
    # The same host and boot, another pid namespace: a container sharing the ledger file.
    there = dataclasses.replace(here, where=here.where.replace("pid:[", "pid:[9"), pid=1)
    ledger.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.db")) as db, db:
        db.execute("UPDATE rentals SET owner = ?", (there.text(),))
    args = ["cleanup", "--ledger", str(tmp_path / "ledger.db")]
    result = CliRunner().invoke(app_for(fake_clore), args)
    assert result.exit_code == 3, result.output
    assert "may still be running" in result.output
    assert [o.id for o in fake_clore.live_orders()] == [order]  # live runs cancelled: 0
    named = CliRunner().invoke(app_for(fake_clore), [*args, "--run", "run-1"])
    assert named.exit_code == 0, named.output  # the operator named it: cancelled on purpose
    assert fake_clore.live_orders() == []
