"""Warm servers in `clore-run serve` on the fake Clore with a real sshd: the next submission
runs on the server the last one left, within its trust domain, and the idle time between is
nobody's job's cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.backends.local import LocalBackend
from runner.cli.serve import _stats_text
from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy, WarmPool
from runner.errors import UsageError
from runner.serve.service import Service, ServiceOptions
from runner.stores.queue.sqlite import SqliteQueue
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import FINAL, TOKEN, thread_server, wait_until
from tests.serve.test_dashboard import logged_in

AUTH = {"Authorization": f"Bearer {TOKEN}"}

KEEP_15 = WarmPolicy(keep_warm_s=900.0)


def test_the_next_submission_takes_the_warm_server_and_pays_only_its_own_time(
    setup: Setup,
) -> None:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-w1")
    with thread_server(
        setup.tmp, capacity=2, clock=setup.clock, backend=backend, warmth=KEEP_15
    ) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        a = srv.api.wait_status("s1.a", FINAL, timeout=60)
        assert a["status"] == "passed"
        setup.clock.advance(600)  # ten minutes idle: inside the keep
        srv.service.wake()
        srv.api.submit("jobs:\n  b:\n    run: echo b\n")
        b = srv.api.wait_status("s2.b", FINAL, timeout=60)
        assert b["status"] == "passed" and b["server"] == a["server"]
        assert len(setup.fake.orders) == 1
        facts = b["attempt_list"][-1]["facts"]
        assert facts["warm_server"] == "true", facts
        assert float(facts["server_wait_s"]) < 2.0
        usd_per_hour = float(facts["usd_per_hour"])
        # b's cost is its own seconds (well under a minute), not the ten idle minutes.
        assert b["cost_usd"] < usd_per_hour * 60 / 3600
        assert backend.idle_cost_usd() >= usd_per_hour * 590 / 3600
        seen_idle_money(srv.api.url, srv.api.get("/stats").json(), usd_per_hour)
        wait_until(lambda: len(srv.service.driver.core) == 0, 10, "the core to settle all")
    assert ledger.unreleased("inst-w1") == []


def seen_idle_money(url: str, stats: dict[str, Any], usd_per_hour: float) -> None:
    """The ten idle minutes are their own figure: REST, status, Prometheus, the dashboard."""
    ten_minutes = usd_per_hour * 600 / 3600
    (row,) = stats["idle_by_day"]
    assert "3090" in row["gpu"] and row["seconds"] >= 600
    assert abs(stats["idle_usd_today"] - row["usd"]) < 1e-9
    assert ten_minutes * 0.98 <= row["usd"] <= ten_minutes * 1.1
    assert stats["idle_budget_usd"] is None
    said = _stats_text(stats)
    assert f"idle: ${row['usd']:.2f} today (NVIDIA GeForce RTX 3090 $" in said, said
    browser = logged_in(url)
    metrics = browser.get(f"{url}/metrics", headers=AUTH).text
    assert f'clore_run_idle_usd_today{{gpu="{row["gpu"]}"}} {row["usd"]:.6f}' in metrics
    html = browser.get(f"{url}/ui/spend").text
    assert 'id="idle-today"' in html and 'id="idle-by-day"' in html and row["gpu"] in html


def test_a_job_of_another_trust_domain_gets_a_server_of_its_own(setup: Setup) -> None:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-w2")
    with thread_server(
        setup.tmp, capacity=2, clock=setup.clock, backend=backend, warmth=KEEP_15
    ) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n", trust="repo-team.one")
        a = srv.api.wait_status("s1.a", FINAL, timeout=60)
        srv.api.submit("jobs:\n  b:\n    run: echo b\n", trust="repo-team.two")
        b = srv.api.wait_status("s2.b", FINAL, timeout=60)
        assert a["status"] == b["status"] == "passed"
        assert a["server"] != b["server"]
        assert len(setup.fake.orders) == 2
    assert ledger.unreleased("inst-w2") == []


def test_a_pool_of_a_gpu_no_offer_has_is_refused_with_the_fix(setup: Setup) -> None:
    backend, _ = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), "inst-w3")
    options = ServiceOptions(
        data_dir=setup.tmp / "data", capacity=2, warmth=WarmPolicy(pools=(WarmPool("H100"),))
    )
    with pytest.raises(UsageError, match="no offer on the market has a GPU matching 'H100'") as e:
        Service(SqliteQueue(setup.tmp / "q.db"), backend, options, setup.clock)
    assert e.value.exit_code == 2 and "clore-run offers" in e.value.hint


def test_warmth_on_a_backend_that_rents_nothing_is_refused(tmp_path: Path) -> None:
    options = ServiceOptions(data_dir=tmp_path / "data", capacity=1, warmth=KEEP_15)
    with pytest.raises(UsageError, match="rents nothing") as e:
        Service(SqliteQueue(tmp_path / "q.db"), LocalBackend(tmp_path), options)
    assert "--backend clore" in e.value.hint
