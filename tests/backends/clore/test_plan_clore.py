"""`clore-run plan --backend clore` against the fake marketplace: offers, per-hour prices, cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.cli import main
from runner.core import predict as predict_module
from tests.fakes.clore_api import ALL_COINS, API_KEY, FakeClore, Faults

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


@pytest.fixture
def api_env(fake_clore: FakeClore, monkeypatch: pytest.MonkeyPatch) -> FakeClore:
    monkeypatch.setenv("CLORE_API_URL", fake_clore.url)
    monkeypatch.setenv("CLORE_API_KEY", API_KEY)
    # The CLI's client spaces its calls on the real clock; the fake would judge them on its
    # fake one, which does not move here.
    fake_clore.enforce_rate_limits = False
    return fake_clore


@pytest.mark.slow
def test_plan_shows_todays_offer_and_cost(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore", "--json"], capsys
    )
    assert code == 0
    plan = json.loads(out)["clore"]
    prepare = plan["jobs"]["prepare"]
    # 88028: RTX 3090 at 2 USD/day on-demand -> 0.0833 USD/h listed, 0.0875 with the renter's
    # 5 % fee; the ceiling is run's worst case: the 6-minute boot bound with 20 minutes more
    # for its image's pull (an image the host history never saw), the 10-minute timeout and
    # 2 minutes to fetch files, past the grace, so the creation fee (0.1 USD).
    assert prepare["offer"]["server_id"] == 88028
    assert prepare["offer"]["usd_per_hour"] == pytest.approx(2 / 24 * 1.05, rel=1e-3)
    assert prepare["ceiling_usd"] == pytest.approx(2 / 24 * 1.05 * 38 / 60 + 0.1, rel=1e-3)
    assert plan["jobs"]["train-rtx-4090"]["offer"]["gpus"].endswith("RTX 4090")
    assert plan["within_budget"] is True and plan["unfit"] == []
    assert API_KEY not in out


@pytest.mark.slow
def test_plan_with_a_job_no_offer_fits_exits_3(
    api_env: FakeClore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = tmp_path / "p.yml"
    pipeline.write_text("jobs:\n  big: {run: x, gpu: {type: H100, count: 8}}\n")
    code, out, err = run_cli(["plan", str(pipeline), "--backend", "clore"], capsys)
    assert code == 3
    assert "big: no offer fits" in out and "closest" in out
    assert API_KEY not in out + err


def test_plan_without_key_says_how_to_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    code, _, err = run_cli(["plan", str(EXAMPLES / "hello.yml"), "--backend", "clore"], capsys)
    assert code == 3 and "CLORE_API_KEY" in err and "Traceback" not in err


@pytest.mark.slow
def test_plan_simulates_the_run_and_gives_makespan_and_cost_ranges(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore", "--json"], capsys
    )
    assert code == 0
    plan = json.loads(out)
    makespan, cost = plan["makespan"], plan["cost"]
    assert (makespan, cost) == (plan["clore"]["makespan"], plan["clore"]["cost"])
    assert plan["prediction_unavailable"] is None
    assert makespan["provision"] == "ahead"
    assert makespan["low_s"] <= makespan["expected_s"] <= makespan["high_s"]
    # 39 estimated minutes on the critical path, plus at least the quickest boot.
    boot_low = makespan["boot_s"][0]
    assert makespan["low_s"] >= 39 * 60 + boot_low
    assert 0 < cost["low_usd"] <= cost["expected_usd"] <= cost["high_usd"]
    # prepare's RTX 3090 goes on to train on a 3090; the 4090 is the only other rental.
    assert cost["fits"] is True and cost["servers_rented"] == 2


@pytest.mark.slow
def test_plan_text_gives_the_simulated_makespan_and_cost(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, err = run_cli(
        ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore"], capsys
    )
    assert code == 0, err
    (line,) = [x for x in text.splitlines() if x.startswith("simulated run")]
    assert line.startswith("simulated run (rented ahead, boots 120-480 s, 2 rental(s)): makespan ")
    assert "cost $" in line and "expected" in line


def _stuck_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core's simulation of the run, caught short: the real one, given too few events to
    end, raises SimulationStuck as a core caught in a loop would."""
    real = predict_module.simulate_servers

    def stuck(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs | {"max_events": 3})

    monkeypatch.setattr(predict_module, "simulate_servers", stuck)


@pytest.mark.slow
def test_a_simulation_that_does_not_end_leaves_plans_prices_and_says_why_in_one_line(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stuck_simulation(monkeypatch)
    args = ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore"]
    code, text, err = run_cli(args, capsys)
    assert code == 0 and "Traceback" not in text + err
    assert "prepare: #88028" in text and "at most $" in text  # the prices stand
    (line,) = [x for x in text.splitlines() if "makespan" in x]
    assert line.startswith(
        "makespan prediction unavailable: the simulated run did not end: the simulation made "
        "3 events and the run has not ended (at "
    )
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0 and "Traceback" not in err
    plan = json.loads(out)
    assert plan["makespan"] is None and plan["cost"] is None
    assert plan["prediction_unavailable"].startswith("the simulated run did not end: ")
    assert plan["clore"]["prediction_unavailable"] == plan["prediction_unavailable"]
    assert plan["clore"]["jobs"]["prepare"]["ceiling_usd"] > 0


@pytest.mark.slow
def test_plan_prices_with_the_accounts_fee_rates_and_says_so(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    api_env.renter_fee_rates["on_demand"] = dict.fromkeys(ALL_COINS, 0.025)  # Proof-of-Holding
    hello = str(EXAMPLES / "ml-pipeline.yml")
    code, out, _ = run_cli(["plan", hello, "--backend", "clore", "--json"], capsys)
    assert code == 0
    plan = json.loads(out)["clore"]
    assert plan["fees"]["source"] == "account" and plan["fees"]["on_demand_fee_rate"] == 0.025
    assert plan["jobs"]["prepare"]["offer"]["usd_per_hour"] == pytest.approx(2 / 24 * 1.025, 1e-3)
    assert len(api_env.calls("renter_fees")) == 1
    code, out, _ = run_cli(["plan", hello, "--backend", "clore"], capsys)
    assert code == 0 and "renter fee 2.5 % on-demand, 1.25 % spot (account rates)" in out


@pytest.mark.slow
def test_plan_without_the_accounts_fee_rates_uses_the_documented_ones_and_says_so(
    api_env: FakeClore, capsys: pytest.CaptureFixture[str]
) -> None:
    api_env.renter_fee_rates["on_demand"] = dict.fromkeys(ALL_COINS, 0.025)  # not read
    api_env.fail_next("renter_fees", Faults.INVALID_ENDPOINT)
    code, out, _ = run_cli(
        ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore"], capsys
    )
    assert code == 0
    assert "renter fee 5 % on-demand, 1.25 % spot (documented rates)" in out
    assert "your fee rates could not be read" in out and "renter_fees" not in out
    api_env.fail_next("renter_fees", Faults.INVALID_ENDPOINT)
    code, out, _ = run_cli(
        ["plan", str(EXAMPLES / "ml-pipeline.yml"), "--backend", "clore", "--json"], capsys
    )
    plan = json.loads(out)["clore"]
    assert code == 0 and plan["fees"]["source"] == "documented"
    assert plan["jobs"]["prepare"]["offer"]["usd_per_hour"] == pytest.approx(2 / 24 * 1.05, 1e-3)


@pytest.mark.slow
def test_plan_skips_a_host_that_failed_lately_says_why_and_simulates_failing_boots(
    api_env: FakeClore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The host history beside the default ledger: the 3090 88028 never booted 2 h ago."""
    import time

    from runner.core.hosts import HostEvent
    from runner.stores.hosts import open_hosts

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLORE_RUN_COORDINATOR", raising=False)
    with open_hosts(tmp_path / ".clore-run" / "hosts.db") as history:
        history.record(HostEvent("88028", "never_up", time.time() - 2 * 3600))
        history.record(HostEvent("100201", "up", time.time() - 3 * 3600, 50.0))
    pipeline = EXAMPLES / "ml-pipeline.yml"
    code, out, _ = run_cli(["plan", str(pipeline), "--backend", "clore"], capsys)
    assert code == 0
    assert "prepare: skipped: #88028: never booted 2 h ago" in out
    assert "40 % of boots failing as the host history says, hedged" in out  # (1 + 0.6) / 4
    code, out, _ = run_cli(["plan", str(pipeline), "--backend", "clore", "--json"], capsys)
    prepare = json.loads(out)["clore"]["jobs"]["prepare"]
    assert prepare["offer"]["server_id"] != 88028
    assert prepare["skipped"] == ["#88028: never booted 2 h ago"]
