"""Only an order provably ours is cancelled by cleanup or adopted by create recovery: the tag
its create carried, echoed by `my_orders`; the create marks, the measured clock offset to the
API and the other echoed values only rule orders out. A refused create makes nothing ours."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.clore import errors as e
from runner.backends.clore.api import OrderRequest
from runner.backends.clore.cleanup import reconcile
from runner.backends.clore.models import Order
from runner.backends.clore.ownership import (
    UNMEASURED,
    Claim,
    ClockOffset,
    LedgerMarks,
    OffsetMeter,
    find_ours,
)
from runner.cli.cleanup import register
from runner.stores.ledger import LedgerError
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import FakeClore, Faults
from tests.fakes.fake_clock import FakeClock

IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"
SERVER = 88028


@pytest.fixture(autouse=True)
def _within_rate_limits(fake_clore: FakeClore) -> Iterator[None]:
    yield
    assert fake_clore.violations == []


def ledger_at(tmp_path: Path, name: str, clock: FakeClock) -> SqliteLedger:
    return SqliteLedger(tmp_path / name / "ledger.db", clock=clock)


def request(server: int = SERVER, image: str = IMAGE, bid: float | None = None) -> OrderRequest:
    return OrderRequest(server, image, "USD-Blockchain", bid, ssh_key="ssh-ed25519 AAAA k")


def intent(ledger: SqliteLedger, server: int = SERVER, image: str = IMAGE, run: str = "X") -> int:
    return ledger.record_intent(run, "job", server, 2.0, "USD-Blockchain", 2 / 24, image=image)


# --- cleanup --------------------------------------------------------------------------------


def test_cleanup_never_cancels_another_runs_order_when_its_create_was_never_sent(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Run X is killed after its intent, before the create; run Y (own ledger, same key) rents
    the same server. X's cleanup must leave Y's order alone."""
    with (
        ledger_at(tmp_path, "x", fake_clore.clock) as x,
        ledger_at(tmp_path, "y", fake_clore.clock) as y,
    ):
        intent(x)
        fake_clore.clock.advance(5)
        yours = intent(y, run="Y")
        order = y_rents(fake_clore, y, yours)
        fake_clore.clock.advance(120)
        actions = reconcile(x, fake_clore.client(), dry_run=False)
    assert [a.kind for a in actions] == ["nothing-created"]
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    assert fake_clore.calls("cancel_order") == []


def y_rents(fake: FakeClore, ledger: SqliteLedger, rental_id: int) -> Order:
    order = fake.client().create_order(request(), journal=LedgerMarks(ledger, rental_id))
    ledger.set_order(rental_id, str(order.id))
    return order


def test_a_sent_create_adopts_no_order_made_after_its_window(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """X sent its create, which made nothing, and died; Y rents the server half an hour later
    (past the longest an unseen image's pull is waited for, which a `ct` stamping the deploy
    could lag by). X's cleanup lists Y's order with the reason and cancels nothing."""
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        fake_clore.fail_next("create_order", Faults.DB_ERROR)
        client = fake_clore.client(recover_delays_s=(1.0,))
        with pytest.raises(e.DatabaseError):
            client.create_order(request(), journal=LedgerMarks(x, rid))
        fake_clore.clock.advance(1800)
        theirs = fake_clore.add_order(SERVER, age_s=0, image=IMAGE)
        fake_clore.clock.advance(60)
        actions = reconcile(x, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["nothing-created"]
        assert f"order {theirs}: it echoes no tag" in actions[0].detail
        assert [r.state for r in x.rentals("X")] == ["failed"]
    assert [o.id for o in fake_clore.live_orders()] == [theirs]


def test_an_order_in_the_window_with_another_tag_is_not_ours(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The time window proves nothing: an order made a second after our create, on our
    server, with our image and currency, is another run's when its tag is not ours."""
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        x.mark_create_sent(rid, fake_clore.clock.time(), (0.0, 1.0), tag=50001)
        fake_clore.clock.advance(1)
        theirs = fake_clore.add_order(SERVER, age_s=0, image=IMAGE, tag=50002)
        fake_clore.clock.advance(120)
        actions = reconcile(x, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["nothing-created"]
        assert "its tag (http_port) is 50002, ours was 50001" in actions[0].detail
    assert [o.id for o in fake_clore.live_orders()] == [theirs]
    assert fake_clore.calls("cancel_order") == []


def test_an_order_echoing_another_image_or_bid_is_not_adopted(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        x.mark_create_sent(rid, fake_clore.clock.time(), (0.0, 1.0), tag=50001)
        fake_clore.clock.advance(2)
        theirs = fake_clore.add_order(SERVER, age_s=0, image="someone/else:latest", tag=50001)
        fake_clore.clock.advance(120)
        actions = reconcile(x, fake_clore.client(), dry_run=False)
    # Our tag with an echo that differs proves nothing either way: listed, kept open.
    assert [a.kind for a in actions] == ["unproven"] and not actions[0].resolved
    assert "its image is 'someone/else:latest'" in actions[0].detail
    assert [o.id for o in fake_clore.live_orders()] == [theirs]
    spot = Claim(SERVER, 1000.0, ClockOffset(0, 1), 1001.0, 50001, IMAGE, "bitcoin", True, 5.0)
    order = Order(
        id=1, si=SERVER, ct=1001, image=IMAGE, currency="bitcoin", spot=True, price=6.0,
        http_port="50001",
    )  # fmt: skip
    assert spot.mismatch(order) == "its price is 6/day, our bid was 5/day"


def test_the_api_clock_offset_is_measured_not_assumed(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The API's clock runs 100 s behind ours: its `ct` looks older than our intent. A fixed
    30 s allowance loses the order (billed, marked failed); the measured offset finds it."""
    fake_clore.api_clock_ahead_s = -100.0
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        fake_clore.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
        client = fake_clore.client(recover_delays_s=())  # the run died before it looked
        client.marketplace()  # a reply before the create, as every run reads the market first
        with pytest.raises(e.DatabaseError):
            client.create_order(request(), journal=LedgerMarks(x, rid))
        (row,) = x.rentals("X")
        assert row.api_offset_low_s is not None and row.api_offset_high_s is not None
        assert row.api_offset_low_s <= -100.0 <= row.api_offset_high_s
        fake_clore.clock.advance(120)
        actions = reconcile(x, fake_clore.client(), dry_run=False)
    assert [a.kind for a in actions] == ["cancelled"]
    assert fake_clore.live_orders() == []


def test_a_row_from_before_the_marks_is_listed_not_cancelled(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    path = tmp_path / "old" / "ledger.db"
    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        intent(ledger)
    db = sqlite3.connect(path)  # as a clore-run without ownership marks left it
    db.execute("UPDATE rentals SET legacy = 1")
    db.commit()
    db.close()
    theirs = fake_clore.add_order(SERVER, age_s=0, image=IMAGE)
    fake_clore.clock.advance(120)
    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["unproven"]
        assert not actions[0].resolved
        assert str(theirs) in actions[0].detail and "by hand" in actions[0].detail
        assert [r.state for r in ledger.rentals("X")] == ["intent"]
    assert [o.id for o in fake_clore.live_orders()] == [theirs]


# --- create recovery ------------------------------------------------------------------------


def test_create_recovery_does_not_adopt_an_order_made_after_the_answer(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The create failed ambiguously and made nothing; while we look, another run rents the
    server (its order echoes its own tag). The old rule (newest order since intent - 30 s)
    adopted it."""
    later = fake_clore.add_order(SERVER, age_s=-30, image=IMAGE, tag=50001)  # 30 s from now
    fake_clore.fail_next("create_order", Faults.DB_ERROR)
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        with pytest.raises(e.DatabaseError, match="most likely not created"):
            fake_clore.client().create_order(request(), journal=LedgerMarks(x, rid))
    assert [o.id for o in fake_clore.live_orders()] == [later]


def test_create_recovery_names_an_untagged_order_stamped_late(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The create is answered HTTP 500 yet made its order; the order shows no tag yet (it is
    listed only once deployed) and `ct` stamps it a minute after our answer (it may stamp the
    deploy). Nothing proves it another's: it may be ours, so it is named, never adopted nor
    taken for "not created" (the long fault run's seed 7011 left such an order billing)."""
    fake_clore.tag_echo = "absent-until-deployed"
    fake_clore.ct_late_s = 60.0
    fake_clore.online_after_s = 3600.0  # deploying all the while we look
    fake_clore.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        with pytest.raises(e.OrderOutcomeUnknownError) as raised:
            fake_clore.client().create_order(request(), journal=LedgerMarks(x, rid))
    made = [o.id for o in fake_clore.live_orders()]
    assert len(made) == 1 and raised.value.maybe_ours == tuple(made)
    assert fake_clore.calls("cancel_order") == []


def test_create_recovery_skips_orders_other_rentals_hold(fake_clore: FakeClore) -> None:
    held = fake_clore.add_order(SERVER, age_s=0, image=IMAGE)
    fake_clore.fail_next("create_order", Faults.DB_ERROR)
    with pytest.raises(e.DatabaseError):
        fake_clore.client().create_order(request(), taken={held})


def test_a_create_the_ledger_cannot_mark_is_never_sent(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)

        def disk_full(*_args: object, **_kwargs: object) -> None:
            raise LedgerError("ledger: cannot mark a create sent: disk full")

        x.mark_create_sent = disk_full  # type: ignore[method-assign]
        with pytest.raises(LedgerError):
            fake_clore.client().create_order(request(), journal=LedgerMarks(x, rid))
    assert fake_clore.calls("create_order") == []


def test_the_mark_is_written_before_the_request_and_the_answer_after(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        y_rents(fake_clore, x, rid)
        (row,) = x.rentals("X")
    (create,) = fake_clore.calls("create_order")
    assert row.create_sent_at is not None and row.create_answered_at is not None
    assert row.create_sent_at <= fake_clore.clock.time() - fake_clore.clock.now() + create.t
    assert row.create_sent_at <= row.create_answered_at


# --- the pieces -----------------------------------------------------------------------------


def test_the_offset_meter_narrows_with_replies_and_starts_over_after_a_step() -> None:
    meter = OffsetMeter()
    assert meter.current() == UNMEASURED
    meter.observe("Thu, 01 Jan 1970 00:16:40 GMT", 990.0, 990.5)  # API 1000 at our 990..990.5
    assert meter.current() == ClockOffset(9.5, 11.0)
    meter.observe("Thu, 01 Jan 1970 00:16:50 GMT", 1000.2, 1000.4)  # API 1010
    assert meter.current() == ClockOffset(pytest.approx(9.6), pytest.approx(10.8))  # type: ignore[arg-type]
    meter.observe("Thu, 01 Jan 1970 00:16:50 GMT", 2000.0, 2000.1)  # our clock jumped
    assert meter.current() == ClockOffset(1010 - 2000.1, 1011 - 2000.0)
    meter.observe("not a date", 1.0, 2.0)
    meter.observe(None, 1.0, 2.0)
    assert meter.current().measured


def test_two_orders_fitting_one_claim_prove_neither() -> None:
    claim = Claim(SERVER, 1000.0, ClockOffset(0, 1), 1001.0, 50001, IMAGE)
    orders = [Order(id=i, si=SERVER, ct=1000, image=IMAGE, http_port="50001") for i in (1, 2)]
    verdict = find_ours(orders, claim)
    assert verdict.order is None and verdict.ambiguous
    assert find_ours(orders, claim, taken={1}).order == orders[1]
    assert find_ours([Order(id=3, si=SERVER, ct=None, http_port="50001")], claim).order is None
    # With no tag echoed, an order in the window may be ours: not adopted, kept open.
    untagged = find_ours([Order(id=4, si=SERVER, ct=1000, image=IMAGE)], claim)
    assert untagged.order is None and untagged.ambiguous


def test_rows_of_a_version_1_ledger_become_legacy(tmp_path: Path) -> None:
    from runner.stores.ledger.sqlite import MIGRATIONS

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:
        db.execute(statement)
    db.execute(
        "INSERT INTO rentals (run_id, job_id, server_id, state, created_at, updated_at) "
        "VALUES ('old', 'j', 1, 'intent', 0, 0)"
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with SqliteLedger(path) as ledger:
        (row,) = ledger.rentals("old")
        assert row.legacy and row.create_sent_at is None
        new = ledger.record_intent("new", "j", 1, None, None, None)
        assert not ledger.rentals("new")[0].legacy and new != row.id


def racing(fake: FakeClore) -> None:
    """Two runs on one key, each pacing only its own calls: the API's shared limit is off, so
    their creates can go out within a second of each other."""
    fake.enforce_rate_limits = False
    fake.appear_after_s = 0.0


def test_the_losers_cleanup_leaves_the_winners_order_alone(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Issue 24: Y and X race for one host. Y's create wins; X's, sent half a second later, is
    refused (code 6 server-already-rented: nothing was created) and its row marked failed, as
    the provisioner does. X's always-run cleanup used to match Y's order by its creation time
    (inside X's send - 1 s ... answer + 15 s), image and currency, and cancel it."""
    racing(fake_clore)
    with (
        ledger_at(tmp_path, "x", fake_clore.clock) as x,
        ledger_at(tmp_path, "y", fake_clore.clock) as y,
    ):
        won = intent(y, run="Y")
        order = fake_clore.client(recover_delays_s=(0.0,)).create_order(
            request(), journal=LedgerMarks(y, won)
        )
        y.set_order(won, str(order.id))
        fake_clore.clock.advance(0.5)
        lost = intent(x)
        with pytest.raises(e.ServerAlreadyRentedError):
            fake_clore.client().create_order(request(), journal=LedgerMarks(x, lost))
        x.set_state(lost, "failed", "server-already-rented")
        fake_clore.clock.advance(60)
        assert reconcile(x, fake_clore.client(), dry_run=False) == []
        result = CliRunner().invoke(cleanup_app(fake_clore), ["cleanup", "--ledger", str(x.path)])
        assert result.exit_code == 0, result.output
        assert "nothing to clean up" in result.stdout
        assert [r.state for r in x.rentals("X")] == ["failed"]
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    assert fake_clore.calls("cancel_order") == []


def test_a_500_but_created_order_is_cancelled_by_its_own_cleanup_only(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Y's create fails ambiguously (HTTP 500 / code 1) and makes nothing; X's, 5.5 s later,
    is answered the same but does rent the host. Both die before looking. Y's cleanup must not
    take X's order (it was made inside Y's window, with Y's image and currency); X's finds it
    by its tag and cancels it."""
    racing(fake_clore)
    with (
        ledger_at(tmp_path, "x", fake_clore.clock) as x,
        ledger_at(tmp_path, "y", fake_clore.clock) as y,
    ):
        nothing = intent(y, run="Y")
        fake_clore.fail_next("create_order", Faults.DB_ERROR)
        with pytest.raises(e.DatabaseError):
            died = fake_clore.client(recover_delays_s=())
            died.create_order(request(), journal=LedgerMarks(y, nothing))
        fake_clore.clock.advance(5.5)
        made = intent(x)
        fake_clore.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
        with pytest.raises(e.DatabaseError):
            died = fake_clore.client(recover_delays_s=())
            died.create_order(request(), journal=LedgerMarks(x, made))
        [order] = fake_clore.live_orders()
        fake_clore.clock.advance(120)
        theirs = reconcile(y, fake_clore.client(), dry_run=False)
        assert [a.kind for a in theirs] == ["nothing-created"]
        assert f"order {order.id}: its tag (http_port) is" in theirs[0].detail
        assert fake_clore.live_orders() == [order] and fake_clore.calls("cancel_order") == []
        ours = reconcile(x, fake_clore.client(), dry_run=False)
        assert [(a.kind, a.order_id) for a in ours] == [("cancelled", order.id)]
        assert [r.state for r in x.rentals("X")] == ["released"]
    assert fake_clore.live_orders() == []


def cleanup_app(fake: FakeClore) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI, so `cleanup` stays a subcommand."""

    register(app, fake.client)
    return app


def test_a_refused_create_with_no_order_says_nothing(fake_clore: FakeClore, tmp_path: Path) -> None:
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        x.mark_create_sent(rid, fake_clore.clock.time(), (0.0, 1.0))
        x.set_state(rid, "failed", "server-already-rented")
        fake_clore.clock.advance(120)
        assert reconcile(x, fake_clore.client(), dry_run=False) == []
        assert [r.state for r in x.rentals("X")] == ["failed"]


def test_a_create_sent_again_after_the_rate_limit_is_marked_at_its_last_send(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The long fault run's seed 7016: a create refused for the rate limit (it made nothing),
    sent again after a wait; `ct` stamped a minute late, so the bill starts at the mark. The
    mark was the refused send's: the wait was billed too (the summary 34 % over the bill)."""
    fake_clore.ct_late_s = 60.0
    fake_clore.fail_next("create_order", Faults.RATE_LIMITED)
    with ledger_at(tmp_path, "x", fake_clore.clock) as x:
        rid = intent(x)
        order = fake_clore.client().create_order(request(), journal=LedgerMarks(x, rid))
        (row,) = x.rentals("X")
    made_unix = fake_clore.orders[order.id].created_unix
    assert fake_clore.calls("create_order")[0].status == 429  # a wait went by since
    assert row.create_sent_at is not None
    assert made_unix - 1.0 <= row.create_sent_at <= made_unix
