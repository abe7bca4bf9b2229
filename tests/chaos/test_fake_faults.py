"""The fake Clore's faults that the chaos suite added, each on the fake clock: callers, hosts
that never come up or answer SSH late, timed preemption and outbids, a cached marketplace,
slow replies, and faults forgotten when the API heals."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from runner.backends.clore.api import OrderRequest
from tests.fakes.clore_api import API_KEY, FakeClore, FakeOrder, Faults
from tests.fakes.fake_clock import FakeClock


def _get(url: str, endpoint: str, **params: str) -> Any:
    reply = requests.get(f"{url}/{endpoint}", params=params, headers={"auth": API_KEY}, timeout=5)
    return reply.json()


def _post(url: str, endpoint: str, body: dict[str, Any]) -> Any:
    reply = requests.post(f"{url}/{endpoint}", json=body, headers={"auth": API_KEY}, timeout=5)
    return reply.json()


def _create(url: str, server: int = 88028, spot: bool = False) -> Any:
    body: dict[str, Any] = {
        "renting_server": server,
        "currency": "USD-Blockchain",
        "image": "cloreai/ubuntu",
        "type": "spot" if spot else "on-demand",
        "ports": {"22": "tcp"},
    }
    if spot:
        body["spotprice"] = 1.5
    return _post(url, "create_order", body)


def _order(fake: FakeClore) -> FakeOrder:
    (order,) = fake.orders.values()
    return order


def _listed(url: str) -> dict[str, Any]:
    (order,) = _get(url, "my_orders")["orders"]
    assert isinstance(order, dict)
    return order


def test_callers_are_recorded_on_requests_orders_and_cancels(fake_clore: FakeClore) -> None:
    fake_clore.enforce_rate_limits = False
    a, b = fake_clore.url_for_caller("a"), fake_clore.url_for_caller("b")
    assert _create(a)["code"] == 0
    order = _order(fake_clore)
    assert order.creator == "a"
    assert _post(b, "cancel_order", {"id": order.id})["code"] == 0
    assert order.cancelled_by == "b"
    assert [(r.caller, r.endpoint) for r in fake_clore.requests] == [
        ("a", "create_order"),
        ("b", "cancel_order"),
    ]
    _get(fake_clore.url, "wallets")  # the plain URL still answers, as no caller
    assert fake_clore.requests[-1].caller == ""


def test_a_never_online_host_is_listed_but_never_up(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.never_online.add(88028)
    _create(fake_clore.url)
    fake_clock.advance(3600)
    listed = _listed(fake_clore.url)
    assert listed["online"] is False and "tcp_ports" not in listed


def test_a_late_sshd_maps_port_22_where_nothing_answers_until_it_is_up(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.ssh_port = 2222
    fake_clore.sshd_late_s[88028] = 5.0
    _create(fake_clore.url)
    fake_clock.advance(fake_clore.online_after_s + 1)
    early = _listed(fake_clore.url)
    assert early["online"] and early["tcp_ports"] == [f"22:{fake_clore.no_sshd_port}"]
    fake_clock.advance(5)
    assert _listed(fake_clore.url)["tcp_ports"] == ["22:2222"]


def test_a_host_port_of_its_own(fake_clore: FakeClore, fake_clock: FakeClock) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.port_for = lambda order: 4000 + order.server_id % 10
    _create(fake_clore.url)
    fake_clock.advance(fake_clore.online_after_s)
    assert _listed(fake_clore.url)["tcp_ports"] == ["22:4008"]


def test_a_spot_order_is_preempted_when_due_once_and_its_container_stops(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    stopped: list[int] = []
    fake_clore.on_container_stop = lambda order: stopped.append(order.id)
    fake_clore.preempt_after_s[88028] = (10.0, "end")
    _create(fake_clore.url, spot=True)
    order = _order(fake_clore)
    fake_clock.advance(9)
    fake_clore.tick()
    assert order.live and stopped == []
    fake_clock.advance(1)
    fake_clore.tick()
    fake_clore.tick()
    assert not order.live and stopped == [order.id]
    assert order.cancelled_by is None  # the host ended it, nobody's cancel


def test_an_outbid_spot_order_stays_listed_offline_and_stops_billing(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.preempt_after_s[88028] = (10.0, "outbid")
    _create(fake_clore.url, spot=True)
    order = _order(fake_clore)
    fake_clock.advance(10)
    fake_clore.tick()
    spend = fake_clore.spend(order.id)
    fake_clock.advance(60)
    assert order.live and fake_clore.outbid(order)
    assert fake_clore.spend(order.id) == spend
    assert _listed(fake_clore.url)["online"] is False


def test_an_on_demand_order_is_never_preempted(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.preempt_after_s[88028] = (1.0, "end")
    _create(fake_clore.url)
    fake_clock.advance(100)
    fake_clore.tick()
    assert _order(fake_clore).live


def test_a_cached_marketplace_shows_a_young_rental_free(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.market_lag_s = 2.0
    _create(fake_clore.url)

    def rented() -> bool:
        servers = _get(fake_clore.url, "marketplace")["servers"]
        return bool(next(s for s in servers if s["id"] == 88028)["rented"])

    assert not rented()
    assert _create(fake_clore.url)["error"] == "server-already-rented"  # the create knows
    fake_clock.advance(2)
    assert rented()


def test_a_slow_reply_leaves_after_the_order_is_made(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.reply_delay_s["create_order"] = 6.0
    before = fake_clock.now()
    _create(fake_clore.url)
    assert fake_clock.now() - before == 6.0  # the fake clock slept for the reply
    assert _order(fake_clore).created_unix == fake_clock.time() - 6.0


def test_clear_faults_forgets_what_was_queued(fake_clore: FakeClore) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.fail_next("wallets", Faults.BAD_GATEWAY, times=3)
    fake_clore.clear_faults()
    assert _get(fake_clore.url, "wallets")["code"] == 0


def test_an_order_request_through_the_client_is_recorded_with_its_caller(
    fake_clore: FakeClore,
) -> None:
    fake_clore.enforce_rate_limits = False
    client = fake_clore.client()
    client.base_url = fake_clore.url_for_caller("run-a")
    client.create_order(OrderRequest(88028, "cloreai/ubuntu", "USD-Blockchain"))
    assert _order(fake_clore).creator == "run-a"


def _tagged_create(url: str, spot: bool = False) -> Any:
    body: dict[str, Any] = {
        "renting_server": 88028,
        "currency": "USD-Blockchain",
        "image": "cloreai/ubuntu",
        "type": "spot" if spot else "on-demand",
        "ports": {"22": "tcp", "54321": "http"},
    }
    if spot:
        body["spotprice"] = 1.5
    return _post(url, "create_order", body)


def test_the_tag_echo_takes_each_shape_and_the_default_is_the_captures(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    assert _tagged_create(fake_clore.url)["code"] == 0
    fake_clock.advance(5)  # listed, not online yet (online after 30 s)
    assert _listed(fake_clore.url)["http_port"] == "54321"
    shown = {}
    for shape in ("integer", "port/http", "list", "absent-until-deployed"):
        fake_clore.tag_echo = shape
        shown[shape] = _listed(fake_clore.url).get("http_port")
    assert shown == {
        "integer": 54321,
        "port/http": "54321/http",
        "list": ["54321"],
        "absent-until-deployed": None,
    }
    fake_clock.advance(30)  # online: the deployed order shows its tag as sent
    assert _listed(fake_clore.url)["http_port"] == "54321"


def test_the_spot_key_can_be_left_out_and_ct_stamped_late(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    assert _tagged_create(fake_clore.url, spot=True)["code"] == 0
    fake_clock.advance(5)
    made = int(_order(fake_clore).created_unix)
    assert (_listed(fake_clore.url)["spot"], _listed(fake_clore.url)["ct"]) == (True, made)
    fake_clore.echo_spot, fake_clore.ct_late_s = False, 40.0
    listed = _listed(fake_clore.url)
    assert "spot" not in listed and listed["ct"] == made + 40


def test_an_unknown_echo_shape_is_refused(fake_clore: FakeClore) -> None:
    with pytest.raises(ValueError, match="as-sent"):
        FakeClore(fake_clore.server, fake_clore.clock, tag_echo="hex")


def _phase(listed: dict[str, Any]) -> tuple[bool, int, bool]:
    return listed["online"], listed["mon_container"], "tcp_ports" in listed


def test_an_image_pull_shows_as_deploying_then_deployed(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    fake_clore.pull_s_by_image["cloreai/ubuntu"] = 420.0
    _create(fake_clore.url)
    fake_clock.advance(fake_clore.online_after_s - 1)
    assert _phase(_listed(fake_clore.url)) == (False, 0, False)  # listed, not online
    fake_clock.advance(1)
    assert _phase(_listed(fake_clore.url)) == (True, 0, False)  # online, the pull begins
    fake_clock.advance(300)
    assert _phase(_listed(fake_clore.url)) == (True, 1, False)  # still pulling
    fake_clock.advance(120)
    listed = _listed(fake_clore.url)
    assert _phase(listed) == (True, 2, True) and listed["pub_cluster"]


def test_no_pull_by_default_deployed_when_online_and_a_host_may_cache_an_image(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    fake_clore.enforce_rate_limits = False
    _create(fake_clore.url)
    fake_clock.advance(fake_clore.online_after_s)
    assert _phase(_listed(fake_clore.url)) == (True, 2, True)
    _post(fake_clore.url, "cancel_order", {"id": _order(fake_clore).id})
    # A host that caches: the first pull takes its time, the next order there none.
    cached = FakeClore(fake_clore.server, fake_clock, pull_s=300.0, caches_images=True)
    assert cached.pull_for(88028, "img:1") == 300.0
    cached.cached_images.add((88028, "img:1"))
    assert (cached.pull_for(88028, "img:1"), cached.pull_for(99173, "img:1")) == (0.0, 300.0)
    cached.pull_s_by_server_image[(99173, "img:1")] = 30.0
    assert cached.pull_for(99173, "img:1") == 30.0
