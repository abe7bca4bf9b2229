"""The body of a Clore `create_order`, checked before it can be sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.backends.clore.ownership import new_tag


@dataclass(frozen=True)
class OrderRequest:
    """The body of `create_order`. Prices are PER DAY in `currency`, as the API takes them.

    `spot_price_per_day` set makes a spot order. No `ssh_password` (keys only) and no
    `required_price` (a client renting for real saw opaque code-1 failures with it set).
    `autossh_entrypoint` makes Clore's own entrypoint run sshd with `ssh_key` before the image's:
    without it only images that run their own sshd (`cloreai/*`) answer SSH.
    """

    server_id: int
    image: str
    currency: str
    spot_price_per_day: float | None = None
    ports: Mapping[str, str] = field(default_factory=lambda: {"22": "tcp"})
    env: Mapping[str, str] = field(default_factory=dict)
    ssh_key: str | None = None
    command: str | None = None
    autossh_entrypoint: bool = True
    # This create's tag: asked for as the order's HTTP port, which `my_orders` echoes as
    # `http_port`, the proof that the order is this create's (see ownership).
    tag: int = field(default_factory=new_tag)

    def __post_init__(self) -> None:
        # An `&` in an env value reproducibly gets HTTP 500 / code 1 (G-gv): refuse it up front.
        bad = sorted(k for k, v in self.env.items() if "&" in v)
        if bad:
            raise ValueError(f"Clore rejects '&' in env values: {', '.join(bad)}")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "renting_server": self.server_id,
            "type": "spot" if self.spot_price_per_day is not None else "on-demand",
            "currency": self.currency,
            "image": self.image,
            "ports": {**self.ports, str(self.tag): "http"},
        }
        if self.spot_price_per_day is not None:
            body["spotprice"] = self.spot_price_per_day
        optional = {"env": dict(self.env), "ssh_key": self.ssh_key, "command": self.command}
        body.update({k: v for k, v in optional.items() if v})
        if self.autossh_entrypoint and self.ssh_key:
            body["autossh_entrypoint"] = True
        return body
