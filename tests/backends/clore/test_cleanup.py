"""`reconcile` and `clore-run cleanup` against the stateful fake Clore API, on a fake clock."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner.backends.clore import errors as e
from runner.backends.clore.cleanup import Action, reconcile
from runner.backends.clore.models import Order
from runner.backends.clore.ownership import order_of
from runner.cli.cleanup import register
from runner.stores.ledger.sqlite import MIGRATIONS, SqliteLedger
from tests.fakes.clore_api import API_KEY, FakeClore, Fault, Faults
from tests.fakes.fake_clock import FakeClock
from tests.processes import marked_env

REPO = Path(__file__).resolve().parents[3]
CANCEL_OK_BUT_KEPT = Fault(200, {"code": 0})  # the API said OK and the order stayed (G-gv)


@pytest.fixture(autouse=True)
def _within_rate_limits(fake_clore: FakeClore) -> Iterator[None]:
    yield
    assert fake_clore.violations == []


@pytest.fixture
def ledger(tmp_path: Path, fake_clock: FakeClock) -> Iterator[SqliteLedger]:
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clock) as ledger:
        yield ledger


def rent(
    fake: FakeClore,
    ledger: SqliteLedger,
    server: int,
    job: str,
    *,
    run: str = "run-1",
    known: bool = True,
) -> tuple[int, int]:
    """What a run does: intent, create (a second later on the API's clock), then maybe the id."""
    rid = ledger.record_intent(run, job, server, 2.0, "USD-Blockchain", 2 / 24, image="old")
    fake.clock.advance(1)
    send(fake, ledger, rid)
    oid = fake.add_order(server, age_s=0, tag=tag_of(rid))
    ledger.mark_create_answered(rid, fake.clock.time())
    if known:  # the run read the id from my_orders: the order is listed by now
        fake.clock.advance(fake.appear_after_s)
        ledger.set_order(rid, str(oid))
        ledger.set_state(rid, "running")
    return rid, oid


def intent_only(
    fake: FakeClore, ledger: SqliteLedger, server: int, job: str, run: str = "run-1"
) -> int:
    """A run that wrote its intent and died before create_order went out."""
    return ledger.record_intent(run, job, server, 2.0, "USD-Blockchain", 2 / 24, image="old")


def send(fake: FakeClore, ledger: SqliteLedger, rental_id: int) -> None:
    """The run marks its create sent, the clock offset measured as the fake's Date shows it,
    with the create's tag."""
    ahead = fake.api_clock_ahead_s
    ledger.mark_create_sent(
        rental_id, fake.clock.time(), (ahead, ahead + 1.0), tag=tag_of(rental_id)
    )


def tag_of(rental_id: int) -> int:
    """The tag the create of `rental_id` carried (drawn at random in a run; fixed here)."""
    return 50000 + rental_id


def sent_only(
    fake: FakeClore, ledger: SqliteLedger, server: int, job: str, run: str = "run-1"
) -> int:
    """A run that sent its create and died before any answer."""
    rid = intent_only(fake, ledger, server, job, run)
    send(fake, ledger, rid)
    return rid


def states(ledger: SqliteLedger, run: str = "run-1") -> list[tuple[str, int | None, str]]:
    return [(r.job_id, order_of(r), r.state) for r in ledger.rentals(run)]


def kinds(actions: list[Action]) -> list[tuple[str, str, int | None]]:
    return [(a.rental.job_id, a.kind, a.order_id) for a in actions]


def live(fake: FakeClore) -> list[int]:
    return [o.id for o in fake.live_orders()]


def cancels(fake: FakeClore) -> list[int]:
    return [r.body["id"] for r in fake.calls("cancel_order")]


# --- reconcile ------------------------------------------------------------------------------


def test_known_order_is_cancelled_confirmed_and_released(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, oid = rent(fake_clore, ledger, 88028, "train")
    fake_clore.clock.advance(600)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("train", "cancelled", oid)]
    assert all(a.resolved for a in actions)
    assert live(fake_clore) == [] and cancels(fake_clore) == [oid]
    assert states(ledger) == [("train", oid, "released")]
    # Confirmed: a listing after the cancel showed it gone.
    assert [r.endpoint for r in fake_clore.requests] == ["my_orders", "cancel_order", "my_orders"]


@pytest.mark.slow
def test_an_order_id_written_as_a_number_by_an_older_ledger_is_still_cancelled(
    fake_clore: FakeClore, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """A ledger file of schema 3 held Clore's order ids as integers; opened now, its ids are
    text, and cleanup must still match them with `my_orders`' numbers."""
    path = tmp_path / "v3.db"
    oid = fake_clore.add_order(88028, age_s=600)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for step in MIGRATIONS[:3]:
            for statement in step:
                db.execute(statement)
        db.execute(
            "INSERT INTO rentals (run_id, job_id, server_id, order_id, state, created_at, "
            "updated_at, price_per_day, currency, usd_per_hour) "
            "VALUES ('run-1', 'train', 88028, ?, 'running', ?, ?, 2.0, 'USD-Blockchain', ?)",
            (oid, fake_clock.time(), fake_clock.time(), 2 / 24),
        )
        db.execute("PRAGMA user_version = 3")
    with SqliteLedger(path, clock=fake_clock) as ledger:
        assert ledger.rentals("run-1")[0].order_id == str(oid)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert kinds(actions) == [("train", "cancelled", oid)]
        assert live(fake_clore) == [] and cancels(fake_clore) == [oid]
        assert states(ledger) == [("train", oid, "released")]


def test_intent_whose_create_did_create_an_order_is_found_and_cancelled(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    fake_clore.add_order(88028, age_s=3600)  # an older order on that server, ended long ago
    fake_clore.end_order(next(iter(fake_clore.orders)))
    _, oid = rent(fake_clore, ledger, 88028, "train", known=False)
    fake_clore.clock.advance(120)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("train", "cancelled", oid)]
    assert live(fake_clore) == [] and cancels(fake_clore) == [oid]
    assert states(ledger) == [("train", oid, "released")]


def test_a_young_intent_waits_for_my_orders_to_catch_up(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    # Killed right after create_order: the order is not listed yet (my_orders lags by 3 s here).
    rid = sent_only(fake_clore, ledger, 88028, "train")
    oid = fake_clore.add_order(88028, age_s=0, tag=tag_of(rid))
    client = fake_clore.client()
    started = fake_clore.clock.now()
    actions = reconcile(ledger, client, dry_run=False)
    assert kinds(actions) == [("train", "cancelled", oid)]
    assert live(fake_clore) == []
    first, second = fake_clore.calls("my_orders")[:2]
    assert second.t - first.t >= sum(client.recover_delays_s) - 1  # waited for the lag
    assert fake_clore.clock.now() - started < 120
    assert states(ledger) == [("train", oid, "released")]


def test_a_sent_create_that_made_nothing_is_marked_failed_after_a_look(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    sent_only(fake_clore, ledger, 88028, "train")
    client = fake_clore.client()
    actions = reconcile(ledger, client, dry_run=False)
    assert kinds(actions) == [("train", "nothing-created", None)]
    assert actions[0].resolved
    assert states(ledger) == [("train", None, "failed")]
    # Only after my_orders was read twice, the second time once any order would show.
    looks = fake_clore.calls("my_orders")
    assert len(looks) == 2 and looks[1].t >= sum(client.recover_delays_s)
    assert fake_clore.calls("cancel_order") == []


def test_an_intent_whose_create_never_went_out_needs_no_wait(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    intent_only(fake_clore, ledger, 88028, "train")
    reconcile(ledger, fake_clore.client(), dry_run=False)
    assert len(fake_clore.calls("my_orders")) == 1
    assert states(ledger) == [("train", None, "failed")]


def test_an_old_empty_intent_needs_no_wait(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    intent_only(fake_clore, ledger, 88028, "train")
    fake_clore.clock.advance(3600)
    reconcile(ledger, fake_clore.client(), dry_run=False)
    assert len(fake_clore.calls("my_orders")) == 1
    assert states(ledger) == [("train", None, "failed")]


def test_orders_that_already_ended_are_released_not_cancelled(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, known = rent(fake_clore, ledger, 88028, "known")
    _, unknown = rent(fake_clore, ledger, 99173, "unknown", known=False)
    fake_clore.end_order(known)
    fake_clore.end_order(unknown)  # ended before anyone learned its id: listed as expired
    fake_clore.clock.advance(120)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("known", "ended", known), ("unknown", "ended", unknown)]
    assert states(ledger) == [("known", known, "released"), ("unknown", unknown, "released")]
    assert fake_clore.calls("cancel_order") == []


def test_an_order_missing_even_from_completed_orders_counts_as_ended(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    rid = intent_only(fake_clore, ledger, 88028, "train")
    ledger.set_order(rid, "123")  # an id the API no longer lists at all
    reconcile(ledger, fake_clore.client(), dry_run=False)
    assert states(ledger) == [("train", 123, "released")]


def test_dry_run_changes_nothing(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    _, known = rent(fake_clore, ledger, 88028, "known")
    _, unknown = rent(fake_clore, ledger, 99173, "unknown", known=False)
    intent_only(fake_clore, ledger, 100201, "nothing")
    fake_clore.clock.advance(120)
    before = ledger.rentals("run-1")
    actions = reconcile(ledger, fake_clore.client(), dry_run=True)
    assert kinds(actions) == [
        ("known", "cancelled", known),
        ("unknown", "cancelled", unknown),
        ("nothing", "nothing-created", None),
    ]
    assert [a.describe() for a in actions] == [
        "would cancel",
        "would cancel",
        "no order; would mark failed",
    ]
    assert ledger.rentals("run-1") == before
    assert sorted(live(fake_clore)) == sorted([known, unknown])
    assert {r.endpoint for r in fake_clore.requests} == {"my_orders"}


def test_a_second_run_does_nothing(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    rent(fake_clore, ledger, 88028, "a")
    rent(fake_clore, ledger, 99173, "b", known=False)
    intent_only(fake_clore, ledger, 100201, "c")
    fake_clore.clock.advance(120)
    client = fake_clore.client()
    assert all(a.resolved for a in reconcile(ledger, client, dry_run=False))
    after_first = (len(fake_clore.requests), ledger.rentals("run-1"))
    assert reconcile(ledger, client, dry_run=False) == []
    assert (len(fake_clore.requests), ledger.rentals("run-1")) == after_first


def test_cancel_ok_but_still_listed_is_cancelled_again(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, oid = rent(fake_clore, ledger, 88028, "train")
    fake_clore.fail_next("cancel_order", CANCEL_OK_BUT_KEPT)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("train", "cancelled", oid)]
    assert cancels(fake_clore) == [oid, oid] and live(fake_clore) == []
    assert states(ledger) == [("train", oid, "released")]


def test_still_listed_after_two_cancels_stays_unreleased(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, oid = rent(fake_clore, ledger, 88028, "train")
    fake_clore.fail_next("cancel_order", CANCEL_OK_BUT_KEPT, times=2)
    [action] = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert (action.kind, action.resolved) == ("error", False)
    assert "cancelled twice, still listed" in action.detail
    assert states(ledger) == [("train", oid, "releasing")]
    assert [r.id for r in ledger.unreleased()] == [action.rental.id]


def test_one_failed_cancel_does_not_stop_the_others(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, a = rent(fake_clore, ledger, 88028, "a")
    _, b = rent(fake_clore, ledger, 99173, "b")
    fake_clore.fail_next("cancel_order", Faults.UNKNOWN_APP_ERROR)  # a's first cancel
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("a", "cancelled", a), ("b", "cancelled", b)]
    assert cancels(fake_clore) == [a, b, a]  # b went ahead; a was retried once
    assert live(fake_clore) == []


def test_a_refused_cancel_is_reported_and_the_rest_released(
    fake_clore: FakeClore, ledger: SqliteLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, a = rent(fake_clore, ledger, 88028, "a")
    _, b = rent(fake_clore, ledger, 99173, "b")
    client = fake_clore.client()
    real_cancel = client.cancel_order

    def cancel(order_id: int, issue: str | None = None) -> None:
        if order_id == a:
            raise e.ApplicationError("Clore API cancel_order: gpu-on-fire (code 6)")
        real_cancel(order_id, issue)

    monkeypatch.setattr(client, "cancel_order", cancel)
    actions = reconcile(ledger, client, dry_run=False)
    assert [(x.rental.job_id, x.kind, x.resolved) for x in actions] == [
        ("a", "error", False),
        ("b", "cancelled", True),
    ]
    assert "gpu-on-fire" in actions[0].detail and actions[0].order_id == a
    assert live(fake_clore) == [a]
    assert states(ledger) == [("a", a, "releasing"), ("b", b, "released")]


def test_unlistable_orders_leave_every_rental_as_it_was(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    rent(fake_clore, ledger, 88028, "a")
    intent_only(fake_clore, ledger, 99173, "b")
    before = ledger.rentals("run-1")
    fake_clore.fail_next("my_orders", Faults.INVALID_TOKEN)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert [(a.kind, a.resolved) for a in actions] == [("error", False)] * 2
    assert "could not list orders" in actions[0].detail and "code 3" in actions[0].detail
    assert ledger.rentals("run-1") == before


def test_an_unconfirmable_cancel_stays_unreleased(
    fake_clore: FakeClore, ledger: SqliteLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    rent(fake_clore, ledger, 88028, "a")
    client = fake_clore.client()
    real_list = client.my_orders

    def my_orders(return_completed: bool = False) -> list[Order]:
        if not return_completed:  # the confirming look fails
            raise e.TransportError(
                "Clore API (listing your orders): timed out", endpoint="my_orders"
            )
        return real_list(return_completed)

    monkeypatch.setattr(client, "my_orders", my_orders)
    [action] = reconcile(ledger, client, dry_run=False)
    assert action.kind == "error" and "could not confirm it in my_orders" in action.detail
    assert live(fake_clore) == [] and [r.state for r in ledger.unreleased()] == ["releasing"]


def test_only_the_named_run_is_touched(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    _, mine = rent(fake_clore, ledger, 88028, "a", run="mine")
    _, theirs = rent(fake_clore, ledger, 99173, "b", run="theirs")
    actions = reconcile(ledger, fake_clore.client(), dry_run=False, run_id="mine")
    assert kinds(actions) == [("a", "cancelled", mine)]
    assert live(fake_clore) == [theirs]
    assert [r.state for r in ledger.rentals("theirs")] == ["running"]


def test_an_intent_never_claims_an_order_another_rental_owns(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    # Run A died before its create on server 88028; run B later rented 88028 and is running.
    intent_only(fake_clore, ledger, 88028, "a", run="A")
    fake_clore.clock.advance(5)
    _, theirs = rent(fake_clore, ledger, 88028, "b", run="B")
    fake_clore.clock.advance(120)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False, run_id="A")
    assert kinds(actions) == [("a", "nothing-created", None)]
    assert live(fake_clore) == [theirs]


def test_two_intents_on_one_server_each_get_their_own_order(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, first = rent(fake_clore, ledger, 88028, "first", known=False)
    fake_clore.end_order(first)
    fake_clore.clock.advance(60)
    _, second = rent(fake_clore, ledger, 88028, "second", known=False)
    fake_clore.clock.advance(120)
    actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert kinds(actions) == [("first", "ended", first), ("second", "cancelled", second)]
    assert live(fake_clore) == []


# --- after kill -9 --------------------------------------------------------------------------

CRASHING_RUN = textwrap.dedent(
    """
    import sys, threading
    from runner.backends.clore.api import CloreClient, OrderRequest
    from runner.backends.clore.ownership import LedgerMarks
    from runner.backends.clore.ratelimit import RateLimiter
    from runner.stores.ledger.sqlite import SqliteLedger

    path, url, key, now = sys.argv[1:]

    class ApiTime:  # the fake API's unix time, frozen; no waiting
        def now(self): return 0.0
        def time(self): return float(now)
        def sleep(self, seconds): pass

    ledger = SqliteLedger(path, clock=ApiTime())
    client = CloreClient(key, base_url=url, limiter=RateLimiter(ApiTime()))
    # One rental the run knows all about ...
    known = ledger.record_intent("crashed", "train", 88028, 2.0, "USD-Blockchain", 2 / 24)
    marks = LedgerMarks(ledger, known)
    order = client.create_order(OrderRequest(88028, "img", "USD-Blockchain"), journal=marks)
    ledger.set_order(known, str(order.id))
    ledger.set_state(known, "running")
    # ... and one whose order exists while the ledger has only the intent.
    rid = ledger.record_intent("crashed", "eval", 99173, 3.0, "USD-Blockchain", 3 / 24, image="img")
    marks = LedgerMarks(ledger, rid)
    client.create_order(OrderRequest(99173, "img", "USD-Blockchain"), journal=marks)
    print("rented", flush=True)
    threading.Event().wait()
    """
)


@pytest.mark.slow
def test_cleanup_leaves_a_run_still_running_alone_and_cleans_it_once_killed(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """A run of this host that still runs holds its rentals: `cleanup` on the same ledger
    must not cancel them (exit 3: run it again once the run has ended). Killed, the run is
    provably dead (its pid is gone) and the next `cleanup` gives everything back at once."""
    path = tmp_path / "ledger.db"
    fake_clore.enforce_rate_limits, fake_clore.appear_after_s = False, 0.0
    args = [path, fake_clore.url, API_KEY, repr(fake_clore.clock.time())]
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUN, *map(str, args)],
        stdout=subprocess.PIPE,
        text=True,
        env=marked_env({"PYTHONPATH": str(REPO)}),
        cwd=REPO,
    )
    command = ["cleanup", "--ledger", str(path)]
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 30)[0], "the run never got to renting"
        assert proc.stdout.readline() == "rented\n"
        alive = cli.invoke(app_for(fake_clore), command)
        assert alive.exit_code == 3, alive.output
        assert f"left alone: run crashed is still running (pid {proc.pid} on " in alive.output
        assert "run `clore-run cleanup` again once they have ended" in alive.output
        assert len(fake_clore.live_orders()) == 2 and cancels(fake_clore) == []
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    fake_clore.clock.advance(120)
    dead = cli.invoke(app_for(fake_clore), command)
    assert dead.exit_code == 0, dead.output
    assert "left alone" not in dead.output and fake_clore.live_orders() == []


@pytest.mark.slow
def test_after_kill_9_cleanup_leaves_no_order_of_that_run_active(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.db"
    # The dead run has its own (real) clock and limiter, which the fake's clock cannot see.
    fake_clore.enforce_rate_limits, fake_clore.appear_after_s = False, 0.0
    args = [path, fake_clore.url, API_KEY, repr(fake_clore.clock.time())]
    env = marked_env({"PYTHONPATH": str(REPO)})
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUN, *map(str, args)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 30)[0], "the run never got to renting"
        assert proc.stdout.readline() == "rented\n"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(fake_clore.live_orders()) == 2
    fake_clore.enforce_rate_limits, fake_clore.appear_after_s = True, 3.0
    fake_clore.clock.advance(120)

    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        assert [(r.job_id, r.state, r.order_id is None) for r in ledger.rentals("crashed")] == [
            ("train", "running", False),
            ("eval", "intent", True),
        ]
        actions = reconcile(ledger, fake_clore.client(), dry_run=False, run_id="crashed")
        assert [a.kind for a in actions] == ["cancelled", "cancelled"]
        assert ledger.unreleased("crashed") == []
    assert fake_clore.live_orders() == []


# --- the command ----------------------------------------------------------------------------

cli = CliRunner()


def app_for(fake: FakeClore | None) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for the real CLI, so `cleanup` stays a subcommand."""

    register(app, fake.client if fake is not None else None)
    return app


def test_command_prints_one_line_per_rental_then_nothing(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    _, a = rent(fake_clore, ledger, 88028, "train")
    intent_only(fake_clore, ledger, 99173, "eval")
    fake_clore.clock.advance(120)
    args = ["cleanup", "--ledger", str(ledger.path)]
    result = cli.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"run-1/train  server 88028  order {a}  cancelled; marked released",
        "run-1/eval  server 99173  order -  no order was created; marked failed",
    ]
    again = cli.invoke(app_for(fake_clore), args)
    assert again.exit_code == 0
    assert again.stdout == f"nothing to clean up: every rental in {ledger.path} is released\n"


def test_command_dry_run_and_run_filter(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    _, mine = rent(fake_clore, ledger, 88028, "train", run="mine")
    rent(fake_clore, ledger, 99173, "eval", run="theirs")
    args = ["cleanup", "--ledger", str(ledger.path), "--run", "mine", "--dry-run"]
    result = cli.invoke(app_for(fake_clore), args)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"mine/train  server 88028  order {mine}  would cancel\n"
    assert fake_clore.calls("cancel_order") == [] and len(fake_clore.live_orders()) == 2


def test_command_exits_3_while_anything_may_still_be_billed(
    fake_clore: FakeClore, ledger: SqliteLedger
) -> None:
    rent(fake_clore, ledger, 88028, "train")
    fake_clore.fail_next("cancel_order", CANCEL_OK_BUT_KEPT, times=2)
    result = cli.invoke(app_for(fake_clore), ["cleanup", "--ledger", str(ledger.path)])
    assert result.exit_code == 3
    assert "still active: cancelled twice" in result.stdout
    assert "1 rental(s) may still be billed" in result.stderr
    assert API_KEY not in result.output


def test_command_without_a_key_exits_3_and_says_how_to_set_it(
    fake_clore: FakeClore, ledger: SqliteLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    rent(fake_clore, ledger, 88028, "train")
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    result = cli.invoke(app_for(None), ["cleanup", "--ledger", str(ledger.path)])
    assert result.exit_code == 3
    assert "CLORE_API_KEY is not set" in result.stderr and "export CLORE_API_KEY" in result.stderr
    assert fake_clore.requests == []


def test_command_needs_no_key_when_there_is_nothing_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    missing = tmp_path / "none.db"
    result = cli.invoke(app_for(None), ["cleanup", "--ledger", str(missing)])
    assert result.exit_code == 0 and "nothing to clean up" in result.stdout
    assert not missing.exists()  # a cleanup does not create ledgers
    SqliteLedger(tmp_path / "empty.db").close()
    empty = cli.invoke(app_for(None), ["cleanup", "--ledger", str(tmp_path / "empty.db")])
    assert empty.exit_code == 0 and "every rental" in empty.stdout


def test_command_on_a_corrupt_ledger_exits_3_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"junk" * 1000)
    result = cli.invoke(app_for(None), ["cleanup", "--ledger", str(path)])
    assert result.exit_code == 3
    assert f"ledger {path}: cannot open: file is not a database" in result.stderr
    assert isinstance(result.exception, SystemExit)  # no traceback


def test_a_dry_run_writes_nothing_at_all(fake_clore: FakeClore, ledger: SqliteLedger) -> None:
    """`cleanup --dry-run` could not read a ledger it may not write (read-only disk, another
    user's file): it opens it read-only, makes no side file, changes no byte."""
    _, order = rent(fake_clore, ledger, 88028, "train")
    ledger.close()
    folder = ledger.path.parent
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = cli.invoke(app_for(fake_clore), ["cleanup", "--ledger", str(ledger.path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"run-1/train  server 88028  order {order}  would cancel\n"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before

    from runner.stores.ledger import LedgerError
    from runner.stores.ledger.sqlite import SqliteLedger

    with SqliteLedger(ledger.path, read_only=True) as look:
        assert [r.job_id for r in look.unreleased()] == ["train"]
        with pytest.raises(LedgerError, match="readonly"):
            look.set_state(look.unreleased()[0].id, "released")
