"""An order that may be ours is never dropped: a run whose create was accepted keeps looking for
its order, and when it still cannot prove it, names it (screen, summary.json's warnings, an
`::error::`) and exits 3; `cleanup` names such an order and exits 3 rather than mark its row
failed, and cancels it only when a person asks (`--cancel-unproven`). Every verdict is kept."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.backends.clore import errors as e
from runner.backends.clore.cleanup import reconcile
from runner.backends.clore.ownership import LedgerMarks
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from runner.stores.ledger.sqlite import SqliteLedger
from tests.backends.clore.killed_create import IMAGE, SERVER, killed_after_an_erring_create, request
from tests.backends.clore.test_ownership import cleanup_app
from tests.fakes.clore_api import FakeClore, Faults
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture

ONE_JOB = "jobs:\n  a: {run: echo hi, gpu: {type: RTX}}\n"


def test_an_accepted_create_whose_order_lists_late_is_named_and_exits_3(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """my_orders lists the order 10 minutes after the create: past every look. Before, the run
    skipped the host after 50 s, rented the next, and left the first billing."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    setup.fake.appear_after_s = 600.0
    pipeline = parse_pipeline(ONE_JOB, "p.yml", {})
    backend, ledger = setup.backend(pipeline)
    (setup.tmp / "ws").mkdir()
    console = io.StringIO()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    record, code = execute(pipeline, backend, options, console)
    assert code == 3, record.results
    assert len(setup.fake.orders) == 1  # the run stopped renting: no second order like it
    said = console.getvalue()
    server = next(iter(setup.fake.orders.values())).server_id
    assert f"clore-run: server {server}: the create was accepted" in said, said
    assert "hint: if no other run uses this API key, `clore-run cleanup --run run-1" in said
    summary = json.loads((setup.tmp / "out" / "summary.json").read_text())
    assert any("was accepted" in w for w in summary["warnings"]), summary["warnings"]
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error")]
    assert any("was accepted" in line and "--cancel-unproven" in line for line in errors), errors
    (row,) = ledger.rentals("run-1")
    assert row.state == "intent"
    kept = [v.verdict for v in ledger.verdicts(row.id)]
    assert kept == ["create-accepted", "unproven"]
    # Once listed, the plain cleanup proves it ours by its tag and cancels it.
    setup.clock.advance(600)
    actions = reconcile(ledger, setup.fake.client(), dry_run=False)
    assert [a.kind for a in actions] == ["cancelled"]
    assert [v.verdict for v in ledger.verdicts(row.id)][-1] == "cleanup: cancelled"


def test_cleanup_never_marks_failed_the_row_of_an_accepted_create_it_cannot_see(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    fake_clore.appear_after_s = 10_000.0
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        rid = ledger.record_intent("X", "job", SERVER, 2.0, "USD-Blockchain", 0.1, image=IMAGE)
        with pytest.raises(e.OrderOutcomeUnknownError):
            client = fake_clore.client(recover_delays_s=(1.0,), follow_up_delays_s=())
            client.create_order(request(), journal=LedgerMarks(ledger, rid))
        fake_clore.clock.advance(300)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["unproven"], actions
        assert "our create was accepted" in actions[0].detail
        assert [r.state for r in ledger.rentals("X")] == ["intent"]
    fake_clore.end_order(next(iter(fake_clore.orders)))  # the fixture checks nothing leaks


@pytest.mark.parametrize("shape", ["unknown", "absent-until-deployed"])
def test_cleanup_names_an_unprovable_order_exits_3_and_the_flag_cancels_it(
    fake_clore: FakeClore, tmp_path: Path, shape: str
) -> None:
    """Killed after the create, on a host that never deploys (its tag never listed) or one
    whose echo no client reads: before, "no order was created; marked failed", exit 0."""
    fake_clore.tag_echo = shape
    fake_clore.never_online.add(SERVER)
    path = tmp_path / "ledger.db"
    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)  # killed before it looked
    (order,) = fake_clore.live_orders()
    fake_clore.clock.advance(120)
    app = cleanup_app(fake_clore)
    plain = CliRunner().invoke(app, ["cleanup", "--ledger", str(path)])
    assert plain.exit_code == 3, plain.output
    assert f"order {order.id} may be ours" in plain.output
    assert "--cancel-unproven" in plain.output
    assert fake_clore.live_orders() == [order] and fake_clore.calls("cancel_order") == []
    on_purpose = CliRunner().invoke(app, ["cleanup", "--ledger", str(path), "--cancel-unproven"])
    assert on_purpose.exit_code == 0, on_purpose.output
    assert fake_clore.live_orders() == []
    with SqliteLedger(path, clock=fake_clore.clock) as ledger:
        (row,) = ledger.rentals("X")
        assert (row.state, row.order_id) == ("released", str(order.id))
        kept = [(v.verdict, v.order_id) for v in ledger.verdicts(row.id)]
        assert kept == [("cleanup: unproven", None), ("cleanup: cancelled", str(order.id))]
        assert "on purpose" in ledger.verdicts(row.id)[-1].reason


def test_the_flag_says_in_help_it_is_for_a_key_no_other_run_uses(fake_clore: FakeClore) -> None:
    shown = CliRunner().invoke(cleanup_app(fake_clore), ["cleanup", "--help"], terminal_width=200)
    text = " ".join(shown.output.replace("│", " ").split())
    assert "--cancel-unproven" in text and "no other run" in text


def test_cleanup_proves_an_accepted_creates_order_by_its_tag_however_late_ct_stamps_it(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """The run saw the create accepted and died looking: its ledger says so, and its cleanup
    takes the order echoing its tag though `ct` is two minutes after the answer."""
    fake_clore.ct_late_s = 120.0
    fake_clore.appear_after_s = 100.0
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        rid = ledger.record_intent("X", "job", SERVER, 2.0, "USD-Blockchain", 0.1, image=IMAGE)
        with pytest.raises(e.OrderOutcomeUnknownError):  # killed while it looked
            client = fake_clore.client(recover_delays_s=(1.0,), follow_up_delays_s=())
            client.create_order(request(), journal=LedgerMarks(ledger, rid))
        fake_clore.clock.advance(300)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["cancelled"], actions
    assert fake_clore.live_orders() == []


def test_cleanup_waits_a_bounded_while_for_a_deploying_orders_tag(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Killed before the create's answer, on a host still deploying: the tag shows only once
    deployed (two minutes after the create: past the 50 s a new order is waited for), so
    cleanup looks again, a bounded while, rather than name it at once."""
    fake_clore.tag_echo = "absent-until-deployed"
    fake_clore.online_after_s = 120.0
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)
        fake_clore.clock.advance(5)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["cancelled"], actions
    assert fake_clore.live_orders() == []


def test_a_failed_create_whose_server_shows_an_unprovable_order_moves_on_and_names_it(
    setup: Setup,
) -> None:
    """A create answered HTTP 500 that made an order whose echo no client reads: the order may
    be ours, so it is named, not cancelled; the failure was the create's own, so the job goes
    to the next host and passes; the run exits 3 all the same."""
    setup.fake.tag_echo = "unknown"
    setup.fake.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
    pipeline = parse_pipeline(ONE_JOB, "p.yml", {})
    backend, ledger = setup.backend(pipeline)
    (setup.tmp / "ws").mkdir()
    console = io.StringIO()
    options = RunOptions(out_dir=setup.tmp / "out", workspace_root=setup.tmp / "ws")
    record, code = execute(pipeline, backend, options, console)
    assert code == 3 and [r.status.value for r in record.results] == ["passed"]
    first, second = setup.fake.orders.values()
    assert first.live and not second.live
    assert f"order {first.id} may be ours" in console.getvalue()
    setup.clock.advance(10)  # a person, later, with a client (and a rate limit) of its own
    result = CliRunner().invoke(
        cleanup_app(setup.fake), ["cleanup", "--ledger", str(ledger.path), "--cancel-unproven"]
    )
    assert result.exit_code == 0, result.output
    assert not first.live


def test_cleanup_waits_too_while_an_online_order_still_pulls_its_image(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    """Online at once, its container deploying (`mon_container` 0, then 1) for two minutes:
    the tag shows only once deployed, so cleanup looks again while it pulls."""
    fake_clore.tag_echo = "absent-until-deployed"
    fake_clore.online_after_s = 1.0
    fake_clore.pull_s_by_server = {SERVER: 120.0}
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)
        fake_clore.clock.advance(5)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["cancelled"], actions
    assert fake_clore.live_orders() == []


def test_a_runs_verdicts_say_why_its_order_was_taken_for_ours(setup: Setup) -> None:
    setup.fake.tag_echo = "port/http"
    record, code, ledger = setup.run(parse_pipeline(ONE_JOB, "p.yml", {}))
    assert code == 0, record.results
    (row,) = ledger.rentals("run-1")
    kept = ledger.verdicts(row.id)
    assert [v.verdict for v in kept] == ["create-accepted", "ours"]
    assert kept[1].order_id == row.order_id and "echoes our tag" in kept[1].reason
    assert "/http" in kept[1].reason
