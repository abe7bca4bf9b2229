"""serve's restart never drops an order that may be a dead instance's silently: each one that
cannot be proven is named in serve's log (with the command that cancels it on purpose) and in
the note its recovered jobs carry; `serve --cancel-unproven` cancels them, as cleanup's flag
does. Nothing is cancelled by a guess."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.backends.clore import errors as e
from runner.backends.clore import wiring
from runner.backends.clore.api import CloreClient, OrderRequest
from runner.backends.clore.ownership import LedgerMarks
from runner.backends.spec import Setup
from runner.cli.commands import app
from runner.core.model import Pipeline
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import FakeClore, Faults

IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"
SERVER = 88028
DEAD = "inst-dead"


def _dead_instance_left_an_unprovable_order(fake: FakeClore, path: Path) -> int:
    """The dead instance's create answered HTTP 500 yet made its order, whose tag echo no
    client reads; it died before it looked."""
    fake.tag_echo = "unknown"
    with SqliteLedger(path, clock=fake.clock) as ledger:
        rid = ledger.record_intent(DEAD, "job", SERVER, 2.0, "USD-Blockchain", 0.1, image=IMAGE)
        fake.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
        with pytest.raises(e.DatabaseError):
            died = fake.client(recover_delays_s=())
            request = OrderRequest(SERVER, IMAGE, "USD-Blockchain", ssh_key="ssh-ed25519 AAAA k")
            died.create_order(request, journal=LedgerMarks(ledger, rid))
    (order,) = fake.live_orders()
    fake.clock.advance(120)
    return order.id


def _restart(
    fake: FakeClore, path: Path, monkeypatch: pytest.MonkeyPatch, cancel_unproven: bool
) -> str:
    monkeypatch.setattr(CloreClient, "from_env", classmethod(lambda cls: fake.client()))
    setup = Setup(
        Pipeline(name="serve", jobs=()), "inst-new", ledger=path, cancel_unproven=cancel_unproven
    )
    return wiring.restart(setup)({DEAD})


def test_a_restart_names_an_order_that_may_be_the_dead_instances_and_cancels_nothing(
    fake_clore: FakeClore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: the restart counted it among rentals that "could not be cancelled" and said
    neither which order nor how to cancel it."""
    path = tmp_path / "ledger.db"
    order = _dead_instance_left_an_unprovable_order(fake_clore, path)
    with caplog.at_level(logging.WARNING, logger="runner.backends.clore.wiring"):
        note = _restart(fake_clore, path, monkeypatch, cancel_unproven=False)
    assert f"may be ours and cannot be proven (servers {SERVER})" in note
    (line,) = [r.getMessage() for r in caplog.records if "restart:" in r.getMessage()]
    assert f"order {order} may be ours" in line
    assert f"clore-run cleanup --run {DEAD} --cancel-unproven" in line
    assert [o.id for o in fake_clore.live_orders()] == [order]
    assert fake_clore.calls("cancel_order") == []
    fake_clore.end_order(order)  # the fixture checks nothing is left billing


def test_serve_cancel_unproven_cancels_it_at_the_restart(
    fake_clore: FakeClore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.db"
    _dead_instance_left_an_unprovable_order(fake_clore, path)
    note = _restart(fake_clore, path, monkeypatch, cancel_unproven=True)
    assert note == "its rental was reconciled with the ledger and cancelled"
    assert fake_clore.live_orders() == []
    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        (row,) = ledger.rentals(DEAD)
        assert row.state == "released"
        assert "on purpose" in ledger.verdicts(row.id)[-1].reason


def test_serves_flag_says_in_help_it_is_for_a_key_no_other_run_uses() -> None:
    shown = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    text = " ".join(shown.output.replace("│", " ").split())
    assert "--cancel-unproven" in text and "no other run" in text
