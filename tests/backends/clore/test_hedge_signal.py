"""SIGINT to a real `clore-run run` while a job's boot and its hedge are both in flight: both
orders are cancelled, and the run exits 130.

The process paces itself on the real clock; the fake's clock stands still, so no order ever comes
online (as in test_doctor's signal test). The host history beside the ledger says most boots on
this market fail, so the job's boot is hedged from the start: two creates, 5.5 s apart.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runner.core.hosts import HostEvent
from runner.stores.hosts import open_hosts
from tests.fakes.clore_api import API_KEY, FakeClore
from tests.processes import default_signals, marked_env


@pytest.mark.slow
def test_sigint_while_a_boot_and_its_hedge_are_in_flight_cancels_both(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    fake_clore.enforce_rate_limits, fake_clore.appear_after_s = False, 0.0
    week_ago = time.time() - 7 * 86400  # kept (30 days), and no host of them is offered
    with open_hosts(tmp_path / "hosts.db") as history:
        for n in range(4):
            history.record(HostEvent(f"9{n}", "never_up", week_ago + n))
    created: list[int] = []
    both = threading.Event()

    def on_create(order: object) -> None:
        created.append(getattr(order, "server_id", 0))
        if len(created) == 2:
            both.set()

    fake_clore.after_create = on_create
    pipeline = tmp_path / "p.yml"
    pipeline.write_text("jobs:\n  train: {run: echo hi, workspace: false, gpu: {type: '3090'}}\n")
    env = marked_env(
        {"CLORE_API_KEY": API_KEY, "CLORE_API_URL": fake_clore.url, "HOME": str(tmp_path)}
    )
    command = [sys.executable, "-m", "runner", "run", str(pipeline), "--backend", "clore"]
    with subprocess.Popen(
        [*command, "--ledger", str(tmp_path / "ledger.db"), "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        preexec_fn=default_signals,
    ) as proc:
        try:
            if not both.wait(60):
                proc.kill()
                out, err = proc.communicate(timeout=10)
                raise AssertionError(f"two creates never went out: {created}\n{out}\n{err}")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, out + err
    assert "as a hedge of a late boot" in out + err
    assert "Traceback" not in err
    assert len(fake_clore.orders) == 2 and sorted(created) == [88028, 100201]
    assert fake_clore.live_orders() == []
    cancelled = sorted(r.body["id"] for r in fake_clore.calls("cancel_order"))
    assert set(cancelled) == set(fake_clore.orders)
