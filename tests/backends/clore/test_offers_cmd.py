"""`clore-run offers` through typer's CliRunner, against the fake API."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.clore.api import CloreClient, RetryPolicy
from runner.backends.clore.ratelimit import RateLimiter
from runner.cli.offers import register
from runner.core.hosts import HostEvent
from runner.stores.hosts import hosts_target, open_hosts
from tests.fakes.clore_api import API_KEY, FakeClore, Faults
from tests.sshd_fixture import free_port

runner = CliRunner()


def app_for(fake: FakeClore, **client_kwargs: object) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI, so `offers` stays a subcommand."""

    register(app, lambda: fake.client(**client_kwargs))
    return app


def test_table_lists_fitting_offers_best_first_in_usd_per_hour(fake_clore: FakeClore) -> None:
    # Listed 2 USD/day on-demand (0.0833 $/h) and 1.5/day spot, with the renter's fee on top.
    result = runner.invoke(app_for(fake_clore), ["offers", "--gpu", "3090"])
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "ID", "GPUS", "VRAM", "$/H", "SPOT", "$/H", "RELIAB", "MAX", "LEN", "CUDA", "COUNTRY"
    ]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["88028", "100201"]
    assert rows[0].split() == [
        "88028", "1x", "RTX", "3090", "24", "GB", "0.087", "0.063", "100.0%", "720", "h", "13.0",
        "US",
    ]  # fmt: skip
    assert rows[1].split()[1:7] == ["2x", "RTX", "3090", "24", "GB", "0.210"]


def test_json_with_price_cap_and_currency(fake_clore: FakeClore) -> None:
    args = ["offers", "--json", "--currency", "USD-Blockchain", "--max-price", "0.1"]
    result = runner.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    # The incident host is cheap in USD-Blockchain (1.61/day); 100706 is cheaper per hour but
    # ranks last at reliability 0.6.
    assert [o["server_id"] for o in listed] == [100504, 88028, 100706]
    assert listed[0]["on_demand_usd_per_hour"] == pytest.approx(1.61 / 24 * 1.05)
    assert all(o["on_demand_usd_per_hour"] <= 0.1 for o in listed)
    assert all(o["currency"] == "USD-Blockchain" for o in listed)


def test_spot_count_vram_and_limit(fake_clore: FakeClore) -> None:
    spot = runner.invoke(app_for(fake_clore), ["offers", "--spot", "--max-price", "0.07", "--json"])
    # Spot minimums: 100706 0.0325 $/h at reliability 0.6 (0.054 per reliable hour) beats
    # 88028 at 0.0625 $/h; 99173's 0.125 $/h is over the cap.
    assert [o["server_id"] for o in json.loads(spot.stdout)] == [100706, 88028]
    big = runner.invoke(app_for(fake_clore), ["offers", "--count", "4", "--min-vram", "40"])
    assert [r.split()[0] for r in big.stdout.splitlines()[1:]] == ["100302"]
    one = runner.invoke(app_for(fake_clore), ["offers", "--json", "--limit", "1"])
    assert len(json.loads(one.stdout)) == 1


def test_no_fit_explains_the_closest_offers(fake_clore: FakeClore) -> None:
    result = runner.invoke(app_for(fake_clore), ["offers", "--gpu", "4090", "--max-price", "0.1"])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no offer fits 1x 4090" in result.stderr
    assert "#100403" in result.stderr and "already rented" in result.stderr


def test_missing_key_exits_3_and_says_how_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)  # the default factory: CloreClient.from_env
    result = runner.invoke(app, ["offers"])
    assert result.exit_code == 3
    assert "CLORE_API_KEY is not set" in result.stderr and "export CLORE_API_KEY" in result.stderr


def test_refused_key_exits_3_without_printing_it(fake_clore: FakeClore) -> None:
    wrong = "sk-wrong-key-7d1e2f"
    app = typer.Typer()
    app.callback()(lambda: None)

    def from_env() -> CloreClient:
        return CloreClient.from_env(limiter=RateLimiter(fake_clore.clock))

    register(app, from_env)
    env = {"CLORE_API_KEY": wrong, "CLORE_API_URL": fake_clore.url}
    result = runner.invoke(app, ["offers"], env=env)
    assert result.exit_code == 3
    assert "refused the key in CLORE_API_KEY" in result.stderr
    assert wrong not in result.output and API_KEY not in result.output
    assert fake_clore.requests[0].auth == wrong  # it did ask the API, at CLORE_API_URL


def test_api_down_exits_3(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("marketplace", Faults.BAD_GATEWAY, times=5)
    app = app_for(fake_clore, retry=RetryPolicy(max_attempts=2))
    result = runner.invoke(app, ["offers"])
    assert result.exit_code == 3
    assert "HTTP 502 with a non-JSON reply" in result.stderr


def test_unknown_currency_is_a_usage_error(fake_clore: FakeClore) -> None:
    result = runner.invoke(app_for(fake_clore), ["offers", "--currency", "dogecoin"])
    assert result.exit_code == 2
    assert "CLORE-Blockchain" in result.stderr
    assert fake_clore.requests == []


def test_prices_include_the_accounts_own_renter_fee(fake_clore: FakeClore) -> None:
    fake_clore.renter_fee_rates["on_demand"]["USD-Blockchain"] = 0.025  # Proof-of-Holding
    args = ["offers", "--json", "--currency", "USD-Blockchain", "--gpu", "3090"]
    result = runner.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    (listed,) = json.loads(result.stdout)
    assert listed["on_demand_usd_per_hour"] == pytest.approx(2 / 24 * 1.025)
    assert listed["on_demand_fee_rate"] == 0.025


def test_an_unreachable_api_shows_each_wait_and_ends_with_one_line(fake_clore: FakeClore) -> None:
    port = free_port()  # nothing listens there: connection refused at once
    app = typer.Typer()
    app.callback()(lambda: None)

    def unreachable() -> CloreClient:
        client = fake_clore.client(retry=RetryPolicy(max_attempts=3))
        client.base_url = f"http://127.0.0.1:{port}/v1"
        return client

    register(app, unreachable)
    result = runner.invoke(app, ["offers"])
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert [re.sub(r"\d+ s", "N s", line) for line in lines[:-2]] == [
        "Clore API (listing the market): connection refused; trying again in N s (try 2 of 3)",
        "Clore API (listing the market): connection refused; trying again in N s (try 3 of 3)",
    ]
    assert re.fullmatch(
        rf"clore-run: Clore API \(listing the market\): cannot reach http://127.0.0.1:{port}/v1: "
        r"connection refused; gave up after \d+ s",
        lines[-2],
    )
    assert lines[-1] == "hint: check the network, or CLORE_API_URL"
    assert "Max retries" not in result.output and "renter_fees" not in result.output
    assert result.stdout == ""


def test_a_host_that_failed_lately_is_skipped_and_said_so(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    ledger = tmp_path / "state" / "ledger.db"
    with open_hosts(hosts_target(ledger)) as history:
        history.record(HostEvent("88028", "never_up", time.time() - 2 * 3600))
    args = ["offers", "--gpu", "3090", "--ledger", str(ledger)]
    result = runner.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    _header, *rows = result.stdout.splitlines()
    assert [r.split()[0] for r in rows] == ["100201", "#88028:"]
    assert rows[-1].startswith("#88028: skipped: never booted 2 h ago")
    as_json = json.loads(runner.invoke(app_for(fake_clore), [*args, "--json"]).stdout)
    assert as_json[-1] == {"server_id": 88028, "skipped": "never booted 2 h ago"}


def test_offers_say_each_hosts_chance_of_a_failed_boot(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """100504 failed 3 boots of 4 (the last one came up, so it is not skipped): its chance is
    over a half, the others take the market's."""
    ledger = tmp_path / "ledger.db"
    now = time.time()
    with open_hosts(hosts_target(ledger)) as history:
        for n, kind in enumerate(("never_up", "never_up", "never_up", "up")):
            history.record(HostEvent("100504", kind, now - 40 * 3600 + n, 60.0))  # type: ignore[arg-type]
    args = ["offers", "--json", "--currency", "USD-Blockchain", "--ledger", str(ledger)]
    listed = json.loads(runner.invoke(app_for(fake_clore), args).stdout)
    chance = {o["server_id"]: o["fail_chance"] for o in listed}
    market = (3 + 0.3 * 2) / (4 + 2)
    assert chance[100504] == pytest.approx((3 + market * 2) / 6)
    assert chance[88028] == pytest.approx(market)


def test_a_hosts_maximum_rental_length_is_shown_and_one_too_short_for_a_job_passed_over(
    fake_clore: FakeClore,
) -> None:
    """100201 lists 73 hours: a 73-hour job with the 6-minute boot bound and 2 minutes of
    fetching files does not fit in it; 88028's 720 hours do."""
    args = ["offers", "--gpu", "3090", "--timeout-minutes", str(73 * 60)]
    result = runner.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    _header, *rows = result.stdout.splitlines()
    assert rows[0].split()[0] == "88028"
    assert rows[-1] == (
        "#100201: passed over: maximum rental length 73 h cannot hold a 4380-minute job's "
        "worst case 73.1 h (boot bound, timeout, fetching files)"
    )
    listed = json.loads(runner.invoke(app_for(fake_clore), [*args, "--json"]).stdout)
    assert [o["server_id"] for o in listed] == [88028, 100201]
    assert listed[0]["max_rental_s"] == 720 * 3600.0 and "passed_over" in listed[1]
    short = runner.invoke(
        app_for(fake_clore), ["offers", "--gpu", "3090", "--timeout-minutes", "60"]
    )
    assert "passed over" not in short.stdout
