"""Watching an order boot: listed, online (its container deploying: the image pulls), deployed,
then its sshd answering; a spot order outbid on the way has its bid raised. Each bound given up
raises the `SkipOffer` that says whose fault it was (a dead host, a slow image's pull, an sshd
that never answered).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runner.backends.clore.api import CloreClient
from runner.backends.clore.models import Order
from runner.backends.clore.rental import (
    CancelledBooting,
    NeverOnline,
    ProvisionCancelled,
    ProvisionOptions,
    Rental,
    SkipOffer,
    SshNeverAnswered,
    StillPulling,
)
from runner.backends.clore.spot_bids import SpotBids
from runner.backends.ssh.connection import Endpoint, SshConnection, connect
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock
from runner.core.pulls import BootBounds
from runner.errors import InfrastructureError

MAX_REBIDS = 3  # raises of one spot order's bid before the job moves to another host


class BootWatch:
    """Polls `my_orders` for one order at a time, pacing itself by `options`."""

    def __init__(
        self,
        client: CloreClient,
        clock: Clock,
        options: ProvisionOptions,
        bids: SpotBids,
        key: ClientKey,
        host_keys: HostKeyStore,
    ) -> None:
        self.client = client
        self.clock = clock
        self.options = options
        self.bids = bids
        self.key = key
        self.host_keys = host_keys

    def _listed(self, order_id: int) -> Order:
        order = next((o for o in self.client.my_orders() if o.id == order_id), None)
        if order is None or order.expired:
            raise SkipOffer(f"order {order_id} ended before it came online")
        return order

    def _rebid_if_outbid(self, rental: Rental | None, order_id: int, rebids: int) -> int:
        """A spot order outbid while it boots gets a higher bid, a few times at most."""
        if rental is None or not rental.spot or not self.bids.outbid(rental):
            return rebids
        if rebids >= MAX_REBIDS:
            raise SkipOffer(f"order {order_id}: outbid again after {rebids} raises")
        self.bids.raise_bid(rental, order_id)
        return rebids + 1

    def wait_online(
        self,
        order_id: int,
        cancel: threading.Event,
        rental: Rental | None = None,
        within_s: float | None = None,
    ) -> Order:
        """The order once it is up (a spot order won back), or SkipOffer past `within_s`."""
        within_s = self.options.online_timeout_s if within_s is None else within_s
        deadline = self.clock.now() + within_s
        delay = self.options.first_poll_s
        rebids = 0
        while True:
            if cancel.is_set():
                raise ProvisionCancelled(f"order {order_id}: cancelled while starting")
            order = self._listed(order_id)
            if order.ready:
                return order
            rebids = self._rebid_if_outbid(rental, order_id, rebids)
            if self.clock.now() >= deadline:
                raise NeverOnline(f"order {order_id} not online after {within_s:g} s")
            self.options.pause(delay, cancel)
            delay = min(delay * 1.5, self.options.max_poll_s)

    def wait_deployed(
        self,
        order_id: int,
        cancel: threading.Event,
        rental: Rental,
        bounds: BootBounds,
        deploying: Callable[[], None] | None = None,
    ) -> Order:
        """Wait for the order through its phases: listed, online (its container deploying:
        the image pulls), deployed. Given up as `NeverOnline` when it is not online within
        its bound (a dead host), as `StillPulling` when it is online but not deployed within
        its image's (nobody's fault). The times land in the rental's facts."""
        started = self.clock.now()
        online_at: float | None = None
        delay = self.options.first_poll_s
        rebids = 0
        while True:
            if cancel.is_set():
                now = self.clock.now()
                raise CancelledBooting(
                    f"order {order_id}: cancelled while starting",
                    now - started,
                    None if online_at is None else now - online_at,
                    rental.image,
                )
            order = self._listed(order_id)
            now = self.clock.now()
            if order.online and online_at is None:
                online_at = now
                rental.facts["online_after_s"] = f"{now - started:.1f}"
                if deploying is not None:
                    deploying()
            if order.ready:
                assert online_at is not None  # ready is online
                rental.facts["deployed_after_s"] = f"{now - started:.1f}"
                rental.facts["pull_s"] = f"{now - online_at:.1f}"
                return order
            rebids = self._rebid_if_outbid(rental, order_id, rebids)
            waited_s = now - started
            verdict = bounds.give_up(waited_s, online_at is not None)
            if verdict == "never_up":
                raise NeverOnline(f"order {order_id} not online after {bounds.online_s:g} s")
            if verdict == "pulling":
                assert online_at is not None
                pulled_s = now - online_at
                raise StillPulling(
                    f"order {order_id}: its container still deploying (the image "
                    f"{rental.image} pulling) {pulled_s:.0f} s after it came online",
                    rental.image,
                    pulled_s,
                )
            # Polls back off, but never past the bound: a dead host is given up when due.
            due_s = bounds.allowance_s if online_at is not None else bounds.online_s
            self.options.pause(max(0.1, min(delay, due_s - waited_s)), cancel)
            delay = min(delay * 1.5, self.options.max_poll_s)

    def connect(self, order: Order, cancel: threading.Event) -> SshConnection:
        """The order's sshd, answering; SshNeverAnswered when it never does."""
        endpoint = order.ssh_endpoint
        assert endpoint is not None  # order.ready guarantees it
        host, port = endpoint
        # connect() waits in real time, on its options' clock (not this one, which tests speed
        # up: the server's sshd does not), so its length is measured on that clock too.
        ssh = self.options.ssh
        started = ssh.clock.now()
        try:
            return connect(Endpoint(host, port, "root"), self.key, self.host_keys, ssh, cancel)
        except InfrastructureError as exc:
            if cancel.is_set():
                raise ProvisionCancelled(str(exc)) from None
            waited_s = ssh.clock.now() - started
            raise SshNeverAnswered(
                f"sshd never answered on {host}:{port} after {waited_s:.0f} s "
                f"(order {order.id} on server {order.si}; {exc.message})"
            ) from None
