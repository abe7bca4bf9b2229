"""A rental as provisioning holds it, the options its steps follow, and how a step fails.

A host that fails for a reason of its own raises `SkipOffer` (the caller excludes it and tries
the next offer); a cancel while it is set up raises `ProvisionCancelled`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.backends.clore import bill
from runner.backends.clore.market import Offer
from runner.backends.ssh.connection import ConnectOptions, SshConnection
from runner.errors import InfrastructureError
from runner.stores.pools import Reservation


class SkipOffer(InfrastructureError):
    """This host failed for a reason of its own: exclude it and try the next offer."""


class NeverOnline(SkipOffer):
    """The order did not come online within the boot bound (the host history keeps it)."""


class SshNeverAnswered(SkipOffer):
    """The order came online but its sshd never answered (the host history keeps it)."""


class StillPulling(SkipOffer):
    """The order came online, but its container was still deploying (its image pulling) when
    the deploy bound ran out: the image's time, not the host's fault. The host history keeps
    it as a pull of at least `pull_s`, never as a failed boot."""

    def __init__(self, message: str, image: str, pull_s: float) -> None:
        super().__init__(message)
        self.image = image
        self.pull_s = pull_s


class ProvisionCancelled(InfrastructureError):
    """The run was cancelled while this rental was being set up (the order is cancelled)."""


class CancelledBooting(ProvisionCancelled):
    """Cancelled while its order booted: how long it had, and how far it got (online, its
    image pulling for `pulled_s`), so that a hedge's loser is remembered as what it was."""

    def __init__(self, message: str, waited_s: float, pulled_s: float | None, image: str) -> None:
        super().__init__(message)
        self.waited_s = waited_s
        self.pulled_s = pulled_s  # None: not online yet
        self.image = image


def _wait_on_event(seconds: float, cancel: threading.Event) -> None:
    cancel.wait(seconds)


@dataclass(frozen=True)
class ProvisionOptions:
    # Create -> online, image pull included, unless the job sets `boot-timeout-minutes`.
    # (bill.DEFAULT_BOOT_BOUND_S: inside the creation fee's grace, the SSH probe included.)
    online_timeout_s: float = bill.DEFAULT_BOOT_BOUND_S
    first_poll_s: float = 3.0  # my_orders polling backoff (the rate limiter spaces it further)
    max_poll_s: float = 30.0
    ssh: ConnectOptions = field(
        # 8 tries: at most ~3 minutes after "online", so a host whose sshd never answers is
        # given up before the creation fee's 10 minutes.
        default_factory=lambda: ConnectOptions(tries=8, backoff_s=2.0, max_backoff_s=20.0)
    )
    # A cancelled order can stay listed for a few seconds: confirm it is gone with backoff
    # for this long before calling it unconfirmed. A shutdown on a signal has GitHub's 7.5 s
    # in all, so it confirms for less and leaves the rest to the cleanup step.
    confirm_within_s: float = 30.0
    shutdown_confirm_within_s: float = 4.0
    # A run stopped by a signal waits this long, from the signal, for rents under way: a
    # create already sent is answered, its order found and cancelled, before CI's SIGKILL
    # (10 s after its SIGINT). One not sent by then is given up at once.
    signal_setup_within_s: float = 9.0
    first_confirm_pause_s: float = 1.0
    # How to pause between polls: the real clock waits on the cancel event; tests pass their
    # fake clock's sleep so nothing waits real seconds.
    pause: Callable[[float, threading.Event], None] = _wait_on_event
    # What an image's pull may add to `online_timeout_s`. None: what the host history says of
    # the image's pulls (runner/core/pulls.py), a generous default for an image never seen.
    deploy_timeout_s: float | None = None


@dataclass
class Rental:
    """A server we hold (or are setting up)."""

    rental_id: int
    job_id: str
    offer: Offer
    price_per_day: float  # in `currency`
    currency: str
    usd_per_hour: float
    order_id: int | None = None
    conn: SshConnection | None = None
    held_since: float = 0.0  # unix seconds (the injected clock)
    billed_until: float = 0.0  # cost up to here is already on some attempt
    creation_fee_usd: float = 0.0
    fee_billed: bool = False
    lost: bool = False  # the server dropped us (spot outbid, gone): never reuse
    spot: bool = False  # a spot order: it can be outbid
    reservation: Reservation | None = None  # its share of a budget pool, when the run joined one
    image: str = ""  # the image its order runs (the host history keeps its pulls)
    facts: dict[str, str] = field(default_factory=dict)
    fee_rate: float = 0.0  # the renter's fee on top of the listed price (in `usd_per_hour`)
    creation_fee_native: float = 0.0
    cancelled_at: float | None = None  # unix seconds of the first cancel sent
    # A cancel went out (the API took it): whoever knows the order first sends it, the
    # run's shutdown or the rent's own thread, and the other does not send it again.
    cancel_sent: bool = False
    tag: int | None = None  # the tag the last create carried (the ownership proof)
    skipped: list[str] = field(default_factory=list)  # hosts tried before this one, and why
    max_usd_per_hour: float | None = None  # the job's cap, fee included: bids stay under it
    # How long the order lived by the API's stamps (`order_end - ct`), once it has ended: an
    # order that ended by itself (expired, preempted, its host gone) before our cancel was
    # billed up to its own end, not up to when we noticed.
    ended_lived_s: float | None = None
    # What the shares billed on our own clock add up to (None: nothing billed yet), and the
    # order's cost as the API billed it, once it is known.
    billed_usd: float | None = None
    order_cost: bill.BilledCost | None = None

    @property
    def usd_per_unit(self) -> float:
        return self.offer.usd_per_unit or 0.0

    def lived_s(self, now_unix: float) -> float:
        if self.ended_lived_s is not None:  # the API's own stamps, once the order has ended
            return self.ended_lived_s
        end = self.cancelled_at if self.cancelled_at is not None else now_unix
        return max(0.0, end - self.held_since)

    def billed_cost(self, spend_native: float, now_unix: float) -> bill.BilledCost:
        """What the order cost as the wallet loses it, from the API's `spend`."""
        return bill.billed_cost(
            spend_native,
            self.usd_per_unit,
            self.fee_rate,
            self.creation_fee_native,
            self.lived_s(now_unix),
        )

    def estimated_cost(self, now_unix: float) -> bill.BilledCost:
        """Our own figure, for when the API reports no `spend`."""
        held_s = self.lived_s(now_unix)
        return bill.estimated_cost(self.usd_per_hour, held_s, self.fee_rate, self.creation_fee_usd)
