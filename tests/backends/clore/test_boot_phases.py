"""A boot's phases as `my_orders` shows them: listed, online and deploying (`mon_container` 0/1:
the image pulls), deployed (2, the connection fields) — and what the rental makes of each."""

from __future__ import annotations

from typing import Any

from runner.backends.clore.models import Order

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
