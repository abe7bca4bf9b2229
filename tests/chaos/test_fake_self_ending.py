"""The fake Clore's orders that end by themselves: a host's maximum rental length (listed in
hours, echoed in seconds, enforced), hosts that end orders on their own, `order_end`, and a
completed order without `spend`; by default none of it, as before."""

from __future__ import annotations

from typing import Any

import requests
from pytest_httpserver import HTTPServer

from tests.fakes.clore_api import API_KEY, FakeClore
from tests.fakes.fake_clock import FakeClock


def _get(fake: FakeClore, endpoint: str, **params: str) -> Any:
    url = f"{fake.url}/{endpoint}"
    return requests.get(url, params=params, headers={"auth": API_KEY}, timeout=5).json()


def _create(fake: FakeClore, server: int = 88028) -> int:
    body = {
        "renting_server": server,
        "currency": "USD-Blockchain",
        "image": "cloreai/ubuntu",
        "type": "on-demand",
        "ports": {"22": "tcp"},
    }
    url = f"{fake.url}/create_order"
    reply = requests.post(url, json=body, headers={"auth": API_KEY}, timeout=5)
    assert reply.json()["code"] == 0
    return max(fake.orders)


def _completed(fake: FakeClore) -> dict[int, Any]:
    orders = _get(fake, "my_orders", return_completed="true")["orders"]
    return {o["id"]: o for o in orders}


def _fake(httpserver: HTTPServer, clock: FakeClock, **options: Any) -> FakeClore:
    fake = FakeClore(httpserver, clock, **options).install()
    fake.enforce_rate_limits = False
    return fake


def test_by_default_nothing_ends_by_itself_and_no_order_end_is_listed(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    order_id = _create(fake_clore)
    fake_clock.advance(30 * 86400.0)  # a month: longer than any listed maximum
    assert fake_clore.orders[order_id].live
    fake_clore.end_order(order_id)
    listed = _completed(fake_clore)[order_id]
    assert listed["expired"] is True and "order_end" not in listed and "spend" in listed
    assert listed["mrl"] == 604800  # the capture's seconds


def test_a_hosts_maximum_rental_length_is_listed_in_hours_and_ends_the_order_in_time(
    httpserver: HTTPServer, fake_clock: FakeClock
) -> None:
    fake = _fake(httpserver, fake_clock, mrl_hours_by_server={88028: 1.0}, echo_order_end=True)
    market = {s["id"]: s for s in _get(fake, "marketplace")["servers"]}
    assert market[88028]["mrl"] == 1.0 and market[99173]["mrl"] == 720
    order_id = _create(fake)
    order = fake.orders[order_id]
    fake_clock.advance(3599.0)
    assert _completed(fake)[order_id]["mrl"] == 3600  # seconds in my_orders
    assert order.live
    fake_clock.advance(400.0)  # nobody looked at the moment it ended
    listed = _completed(fake)[order_id]
    assert not order.live and fake.ended_by_itself == {order_id: "expired"}
    assert listed["expired"] is True
    assert listed["order_end"] == int(order.created_unix + 3600.0)
    # Billed up to its end, not up to the look that found it ended.
    assert fake.lived_s(order_id) == 3600.0
    assert listed["spend"] == order.price_per_day * 3600.0 / 86400
    assert order.cancelled_by is None


def test_a_host_ends_any_order_on_it_and_a_completed_order_may_lack_its_spend(
    httpserver: HTTPServer, fake_clock: FakeClock
) -> None:
    fake = _fake(
        httpserver,
        fake_clock,
        ends_after_s={88028: (700.0, "host-gone")},
        echo_order_end=True,
        completed_spend=False,
    )
    stopped: list[int] = []
    fake.on_container_stop = lambda order: stopped.append(order.id)
    order_id = _create(fake)
    fake_clock.advance(650.0)
    assert "spend" in _completed(fake)[order_id]  # a live order shows its spend
    fake_clock.advance(100.0)
    listed = _completed(fake)[order_id]
    assert fake.ended_by_itself == {order_id: "host-gone"} and stopped == [order_id]
    assert "spend" not in listed and listed["order_end"] - listed["ct"] == 700
    assert fake.billed(order_id) > fake.orders[order_id].creation_fee  # past the 10 minutes
