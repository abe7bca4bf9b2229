"""The pool reaper (`cleanup --coordinator`) never drops an order that may be a dead holder's
silently: it names each such order, exits 3 with the command that cancels it on purpose, keeps
the reservation, and `--cancel-unproven` cancels it and settles the reservation."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.clore import errors as e
from runner.backends.clore.api import OrderRequest
from runner.backends.clore.ownership import LedgerMarks
from runner.cli.cleanup import register
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools import Reservation
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_api import FakeClore, Faults
from tests.stores.pg_helpers import at

IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"
SERVER = 88028
T0, LATER = "2026-12-31T12:00:00Z", "2026-12-31T12:10:00Z"


def _dead_holder_left_an_unprovable_order(fake: FakeClore, pg_url: str) -> int:
    """run-dead joined the pool, reserved, sent its create (HTTP 500, yet made the order,
    whose tag echo no client reads) and died before it looked."""
    pools = PostgresPools(at(pg_url, T0))
    pools.create("org", 10.0, per_day=False, max_servers=2)
    lease = pools.join("org", "run-dead", 30)
    reservation = pools.reserve(lease, 1.0)
    assert isinstance(reservation, Reservation)
    fake.tag_echo = "unknown"
    with PostgresLedger(pg_url, clock=fake.clock) as ledger:
        rid = ledger.record_intent(
            "run-dead", "job", SERVER, 2.0, "USD-Blockchain", 0.1, image=IMAGE
        )
        pools.attach(lease, reservation.id, rid)
        fake.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
        with pytest.raises(e.DatabaseError):
            died = fake.client(recover_delays_s=())
            request = OrderRequest(SERVER, IMAGE, "USD-Blockchain", ssh_key="ssh-ed25519 AAAA k")
            died.create_order(request, journal=LedgerMarks(ledger, rid))
    (order,) = fake.live_orders()
    fake.clock.advance(120)
    return order.id


def _app(fake: FakeClore) -> typer.Typer:
    app = typer.Typer()
    register(app, client_factory=fake.client)
    app.command("noop")(lambda: None)  # a group, so that `cleanup` is a subcommand
    return app


def test_the_reaper_names_an_unprovable_order_exits_3_and_the_flag_cancels_it(
    fake_clore: FakeClore, pg_url: str
) -> None:
    """Before: "reaped run-dead: 1 rental(s) reconciled, 0 reservation(s) settled" and "not
    confirmed released: run again", the order never named, no way to cancel it but by hand."""
    order = _dead_holder_left_an_unprovable_order(fake_clore, pg_url)
    app = _app(fake_clore)
    plain = CliRunner().invoke(app, ["cleanup", "--coordinator", at(pg_url, LATER)])
    assert plain.exit_code == 3, plain.output
    assert f"order {order} may be ours" in plain.output
    assert "--coordinator URL --cancel-unproven" in plain.output
    assert fake_clore.live_orders()[0].id == order and fake_clore.calls("cancel_order") == []
    on_purpose = CliRunner().invoke(
        app, ["cleanup", "--coordinator", at(pg_url, "2026-12-31T12:20:00Z"), "--cancel-unproven"]
    )
    assert on_purpose.exit_code == 0, on_purpose.output
    assert "1 reservation(s) settled" in on_purpose.output
    assert fake_clore.live_orders() == []
    assert PostgresLedger(pg_url).unreleased() == []
