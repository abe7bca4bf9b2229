"""A rental given back while it is still being set up, at the end of a run or on a signal: its
order is cancelled the moment it is known, the core hears ServerReleased only once the rent is
over (with what it cost), and a signal cuts the confirming short once the cancels are out.

Each test holds the rent at its "booting" stage (the order known, not yet online) with an
event, so the moment is exact and nothing waits on time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from runner.backends.base import StageSink
from runner.backends.clore.backend import CloreBackend
from runner.core.rentals import RentFailed, RentServer, ServerEvent, ServerReleased
from runner.errors import InfrastructureError
from runner.spec.loader import parse_pipeline
from tests.backends.clore.test_clore_run import _ONE_3090, ByHand
from tests.fakes.clore_api import Faults
from tests.fakes.clore_on_sshd import Setup, fake_cost_usd
from tests.fakes.clore_on_sshd import setup as setup  # the fixture


class HeldAtBoot:
    """A stage sink that stops the rent at "booting" until `go` is set."""

    def __init__(self) -> None:
        self.booting = threading.Event()
        self.go = threading.Event()

    def stage(self, name: str, detail: str = "", usd_per_hour: float | None = None) -> None:
        if name == "booting":
            self.booting.set()
            assert self.go.wait(30), "the test never let the rent go on"


def rent_on_a_thread(
    hand: ByHand, stages: StageSink
) -> tuple[threading.Thread, list[ServerEvent], RentServer]:
    cmd = next(c for c in hand.todo if isinstance(c, RentServer))
    hand.todo.remove(cmd)
    reports: list[ServerEvent] = []
    thread = threading.Thread(
        target=hand.backend.rent, args=(cmd, hand.jobs[cmd.for_job], reports.append, stages)
    )
    thread.start()
    return thread, reports, cmd


def when_cancel_sent(backend: CloreBackend, then: Callable[[], None]) -> None:
    """Call `then` right after the backend sends a cancel for a rental being set up."""
    send = backend.provisioner.send_cancel

    def sent(rental: Any) -> bool:
        done = send(rental)
        then()
        return done

    backend.provisioner.send_cancel = sent  # type: ignore[method-assign]


def test_a_server_given_back_while_booting_is_cancelled_then_reported_released(
    setup: Setup,
) -> None:
    setup.fake.online_after_s = 600.0
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    stages = HeldAtBoot()
    thread, rent_reports, cmd = rent_on_a_thread(hand, stages)
    assert stages.booting.wait(30)
    when_cancel_sent(hand.backend, stages.go.set)
    released: list[ServerEvent] = []
    hand.backend.release_server(cmd.server, "not needed", released.append)
    thread.join(30)
    (order,) = setup.fake.orders.values()
    assert setup.fake.live_orders() == []
    assert [c.body["id"] for c in setup.fake.calls("cancel_order")] == [order.id]  # sent once
    (event,) = released
    assert isinstance(event, ServerReleased) and event.cost_usd is not None
    assert event.cost_usd == pytest.approx(fake_cost_usd(setup.fake), rel=0.01, abs=1e-6)
    assert [type(e) for e in rent_reports] == [RentFailed]
    assert [r.state for r in hand.ledger.rentals("run-1")] == ["released"]


def test_a_run_that_ends_with_a_rent_under_way_waits_for_it_and_leaks_nothing(
    setup: Setup,
) -> None:
    """The issue's leak: every job passed while a rent was booting. The shutdown cancels its
    known order at once and waits for the rent to end, however long the API takes."""
    setup.fake.online_after_s = 600.0
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    stages = HeldAtBoot()
    thread, _, _ = rent_on_a_thread(hand, stages)
    assert stages.booting.wait(30)
    when_cancel_sent(hand.backend, stages.go.set)
    hand.backend.shutdown()  # raises if a rental is left unconfirmed
    thread.join(30)
    assert setup.fake.live_orders() == []
    assert [r.state for r in hand.ledger.rentals("run-1")] == ["released"]


def test_a_signal_stops_confirming_once_the_cancels_are_out(setup: Setup) -> None:
    """cancel_order failing at the end: confirming would try again for half a minute; a
    signal (stop_soon) makes the run say what is left and go, the cancel sent."""
    hand = ByHand(setup, parse_pipeline(_ONE_3090, "p.yml", {}))
    hand.rent_until_ready()
    setup.fake.fail_next("cancel_order", Faults.BAD_GATEWAY, times=1000)
    hand.backend.stop_soon()
    with pytest.raises(InfrastructureError, match="not confirmed released"):
        hand.backend.shutdown()
    assert len(setup.fake.calls("cancel_order")) == 1
    # (The action's cleanup step finishes it; here the fake ends it for the fixture's check.)
    for order in setup.fake.live_orders():
        setup.fake.end_order(order.id)
