"""The memory of hosts: records from events, skips, chances, expected boots and costs."""

from __future__ import annotations

import pytest

from runner.core import hosts
from runner.core.hosts import HostEvent, HostMemory, records

GRACE_S = 600.0  # a creation fee charged past 10 minutes, as Clore does

H = 3600.0


def test_a_record_counts_each_kind_and_the_failures_since_the_last_boot() -> None:
    events = [
        HostEvent("a", "up", 10, 40.0),
        HostEvent("a", "never_up", 30),
        HostEvent("a", "ssh_failed", 20),  # out of order: sorted by time
        HostEvent("a", "preempted", 40),
        HostEvent("b", "up", 5, 100.0),
    ]
    a = records(events)["a"]
    assert (a.ups, a.never_up, a.ssh_failed, a.preempted) == (1, 1, 1, 1)
    assert a.failures_in_a_row == 2  # preemption is the market's doing, not a failed boot
    assert (a.last_failure_kind, a.last_failure_at, a.last_kind) == ("never_up", 30, "preempted")
    assert a.mean_boot_s == 40.0 and a.boots == 3
    assert records(events)["b"].failures_in_a_row == 0


def test_a_failed_host_is_skipped_for_longer_after_each_failure_in_a_row() -> None:
    one = HostMemory.of([HostEvent("a", "never_up", 0)], now=2 * H)
    assert one.skip_reason("a") == "never booted 2 h ago"
    assert HostMemory.of([HostEvent("a", "never_up", 0)], now=6 * H).skip_reason("a") is None
    two = [HostEvent("a", "never_up", 0), HostEvent("a", "ssh_failed", H)]
    assert HostMemory.of(two, now=11 * H).skip_reason("a") == (
        "booted but SSH never answered 10 h ago (2 in a row)"
    )
    assert HostMemory.of(two, now=13 * H).skip_reason("a") is None
    assert hosts.skip_for_s(30) == hosts.SKIP_MAX_S
    came_back = [*two, HostEvent("a", "up", 2 * H, 50.0)]
    assert HostMemory.of(came_back, now=2 * H + 1).skip_reason("a") is None
    assert HostMemory.of(came_back, now=2 * H + 1).skipped() == {}
    assert HostMemory.of(two, now=2 * H).skipped() == {
        "a": hosts.HostMemory.of(two, 2 * H).skip_reason("a")
    }


def test_the_chance_of_a_failed_boot_weighs_the_host_against_the_market() -> None:
    empty = HostMemory()
    assert empty.fail_chance("x") == pytest.approx(hosts.PRIOR_FAIL_RATE)
    events = [HostEvent("good", "up", t, 60.0) for t in range(8)]
    events += [HostEvent("bad", "never_up", t) for t in range(4)]
    memory = HostMemory.of(events, now=1e9)
    w = hosts.PRIOR_WEIGHT
    market = (4 + 0.3 * w) / (12 + w)
    assert memory.market.fail_rate == pytest.approx(market)
    assert memory.fail_chance("unknown") == pytest.approx(market)
    assert memory.fail_chance("bad") == pytest.approx((4 + market * w) / (4 + w))
    assert memory.fail_chance("good") == pytest.approx((0 + market * w) / (8 + w))


def test_the_expected_boot_is_the_hosts_own_else_the_markets_else_the_default() -> None:
    memory = HostMemory.of(
        [
            HostEvent("a", "up", 1, 40.0),
            HostEvent("a", "up", 2, 60.0),
            HostEvent("b", "up", 3, 200.0),
        ],
        now=10,
    )
    assert memory.expected_boot_s("a") == 50.0
    assert memory.expected_boot_s("new") == pytest.approx(100.0)
    assert HostMemory().expected_boot_s("new") == hosts.DEFAULT_BOOT_S


def test_a_failed_boot_costs_the_fee_only_past_the_grace() -> None:
    assert hosts.failed_boot_usd(0.6, 0.1, 360, GRACE_S) == pytest.approx(0.06)
    assert hosts.failed_boot_usd(0.6, 0.1, 900, GRACE_S) == pytest.approx(0.15 + 0.1)


def test_the_expected_cost_counts_each_failed_boot_in_money_and_in_time() -> None:
    # p = 0.5: one failed boot expected before one comes up; it costs 0.15 + 0.1 (fee past the
    # grace) and 0.15 of the job's time at the host's price.
    assert hosts.expected_usd_per_hour(0.6, 0.1, 0.5, 900, GRACE_S) == pytest.approx(
        0.6 + 0.25 + 0.15
    )
    assert hosts.expected_usd_per_hour(0.6, 0.1, 0.0, 900, GRACE_S) == 0.6
    # Never certain: a host that failed every boot is dear, not infinitely so.
    assert hosts.expected_usd_per_hour(0.6, 0.1, 1.0, 360, GRACE_S) == pytest.approx(
        0.6 + 19 * 0.12
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(40, "40 s"), (600, "10 min"), (7200, "2 h"), (3 * 86400, "3 d")]
)
def test_ago_text(seconds: float, text: str) -> None:
    assert hosts.ago_text(seconds) == text
