"""A boot's phases as `my_orders` shows them: listed, online and deploying (`mon_container` 0/1:
the image pulls), deployed (2, the connection fields) — and what the rental makes of each."""

from __future__ import annotations

import dataclasses
from typing import Any

from runner.backends.clore.market import matching_offers
from runner.backends.clore.models import Order
from runner.core.hosts import HostEvent, HostMemory
from runner.core.model import GpuAsk
from tests.backends.clore.test_market import offer

IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"

CAPTURED: dict[str, Any] = {  # reference §2.3: one minute old, online, mon_container 0
    "id": 1939941,
    "si": 88028,
    "mon_container": 0,
    "online": True,
    "pub_cluster": ["n1.us.clorecloud.net"],
    "tcp_ports": ["22:1972"],
}


def test_a_container_deploying_is_not_ready_even_with_its_endpoint_shown() -> None:
    deploying = Order.model_validate(CAPTURED)
    assert deploying.deploying and not deploying.ready
    assert Order.model_validate({**CAPTURED, "mon_container": 1}).deploying
    deployed = Order.model_validate({**CAPTURED, "mon_container": 2})
    assert deployed.ready and not deployed.deploying
    # No `mon_container` at all (a reply that leaves it out): the endpoint decides, as before.
    bare = {k: v for k, v in CAPTURED.items() if k != "mon_container"}
    assert Order.model_validate(bare).ready
    # Offline: neither (a host not up yet, or never).
    offline = Order.model_validate({**CAPTURED, "online": False})
    assert not offline.deploying and not offline.ready


def test_a_host_that_deployed_the_image_fast_ranks_first_among_hosts_priced_alike() -> None:
    base = offer(99173)
    cheap = dataclasses.replace(base, server_id=1, on_demand_usd_per_hour=0.40, reliability=1.0)
    cached = dataclasses.replace(base, server_id=2, on_demand_usd_per_hour=0.42, reliability=1.0)
    dear = dataclasses.replace(base, server_id=3, on_demand_usd_per_hour=0.60, reliability=1.0)
    events = [
        HostEvent("1", "up", 1.0, 450.0, image=IMAGE, pull_s=420.0),  # pulled it for 7 minutes
        HostEvent("2", "up", 2.0, 40.0, image=IMAGE, pull_s=6.0),  # its cache held it
        HostEvent("3", "up", 3.0, 40.0, image=IMAGE, pull_s=4.0),
    ]
    memory = HostMemory.of(events, now=10.0)
    ask, candidates = GpuAsk(), [cheap, cached, dear]
    assert [o.server_id for o in matching_offers(candidates, ask, memory=memory)] == [1, 2, 3]
    ranked = matching_offers(candidates, ask, memory=memory, images=[IMAGE])
    assert [o.server_id for o in ranked] == [2, 1, 3]  # a 7-minute wait outweighs 2 %
    # Another image: nothing known of its pulls, price decides.
    other = matching_offers(candidates, ask, memory=memory, images=["other:1"])
    assert [o.server_id for o in other] == [1, 2, 3]
