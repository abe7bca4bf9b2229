"""An image that takes minutes to pull on every host, on the fake Clore and a real sshd: the
boot is alive while its container deploys (`mon_container` 0/1), so the job passes on default
settings, no host is hedged for a pull every host shares, and no host is blamed for it.

The market and clock are tests/backends/clore/test_dead_hosts.py's (four 4090s, online 5 s
after their create, a clock at 40x real time).
"""

from __future__ import annotations

import pytest

from runner.core.model import Pipeline
from runner.spec.loader import parse_pipeline
from runner.stores.hosts import open_hosts
from tests.backends.clore.test_dead_hosts import HOSTS, Market
from tests.backends.clore.test_dead_hosts import market as market  # the fixture

IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
PULL_S = 420.0  # seven minutes, on every host


def default_settings_job() -> Pipeline:
    text = (
        "currency: USD-Blockchain\n"
        f"jobs:\n  train:\n    run: echo trained\n    gpu: {{type: '4090'}}\n    image: {IMAGE}\n"
    )
    return parse_pipeline(text, "p.yml", {})


def blamed(market: Market) -> dict[str, str]:
    """Hosts the history now skips, with why."""
    with open_hosts(market.tmp / "hosts.db", clock=market.clock) as history:
        return history.memory().skipped()


def test_a_seven_minute_pull_on_every_host_passes_with_one_order_and_blames_none(
    market: Market, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = market.fake
    fake.pull_s = PULL_S
    record, code, said, _ = market.run(default_settings_job(), "run-1")
    assert code == 0, [(r.job_id, r.reason) for r in record.results]
    orders = len(fake.orders)
    assert orders == 1, said  # no hedge for a pull every host shares
    assert blamed(market) == {}
    with open_hosts(market.tmp / "hosts.db", clock=market.clock) as history:
        (event,) = history.events()
    assert (event.kind, event.host, event.image) == ("up", str(HOSTS[0]), IMAGE)
    assert event.pull_s is not None and PULL_S - 1 <= event.pull_s <= PULL_S + 45
    facts = record.results[0].attempts[-1].facts
    with capsys.disabled():
        print(
            f"\na {PULL_S / 60:.0f}-minute pull on every host, default settings: exit {code}, "
            f"{orders} order(s) for 1 job, {len(blamed(market))} host(s) blamed, "
            f"SSH ready {facts['ssh_ready_after_s']} s after the create"
        )
