"""A warm server when serve dies: in the ledger like any rental, so the next start (or
`clore-run cleanup`) cancels it; never adopted (its last job's leftovers and its trust domain
are not known any more)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from runner.backends.clore.cleanup import reconcile
from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy
from runner.serve.service import Service, ServiceOptions
from runner.serve.submit import prepare_pipeline
from runner.stores.queue import QueueStore, open_queue
from runner.stores.queue.sqlite import SqliteQueue
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import wait_until

KEEP_15 = WarmPolicy(keep_warm_s=900.0)


def service(
    setup: Setup, instance: str, store: QueueStore | None = None
) -> tuple[Service, QueueStore]:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), instance)
    client = backend.client  # one client, one rate limiter, as `serve` has

    def cancel_through_the_ledger(tokens: set[str]) -> str:
        for token in sorted(tokens):
            reconcile(ledger, client, dry_run=False, run_id=token, settle_s=0.0)
        return "reconciled"

    store = store or SqliteQueue(setup.tmp / "queue.db")
    options = ServiceOptions(
        data_dir=setup.tmp / "data",
        capacity=2,
        backoff=lambda n: 0.0,
        reconcile=cancel_through_the_ledger,
        instance=instance,
        warmth=KEEP_15,
    )
    return Service(store, backend, options, setup.clock), store


def test_a_warm_server_left_by_a_dead_serve_is_cancelled_at_the_next_start(
    setup: Setup, tmp_path: Path
) -> None:
    first, store = service(setup, "inst-dead")
    first.start()
    first.submit(prepare_pipeline("jobs:\n  a:\n    run: echo a\n", ()), "pipeline")
    wait_until(lambda: (store.job("s1.a") or [None])[0].status == "passed", 60, "a to pass")  # type: ignore[union-attr]
    wait_until(lambda: first.servers_held == 1, 10, "the server kept warm")
    assert len(setup.fake.live_orders()) == 1
    # kill -9: the loop stops, nothing is handed over or given back, no stop is recorded.
    first.driver.quit()
    first._thread.join(10)
    assert len(setup.fake.live_orders()) == 1

    setup.clock.advance(5)  # a restart takes seconds: the API's rate limits hold across it
    second, _ = service(setup, "inst-next")
    second.start()
    try:
        assert setup.fake.live_orders() == []  # cancelled through the ledger, not adopted
        _, ledger = setup.backend(Pipeline(name="serve", jobs=()), "inst-check")
        assert ledger.unreleased("inst-dead") == []
    finally:
        second.stop()


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_restart_shows_the_idle_money_it_had(
    setup: Setup, db: str, request: pytest.FixtureRequest
) -> None:
    """Idle figures lived in the core's memory: a restart showed (and budgeted) none of the
    day's idle money. Now what /stats, status, the dashboard and Prometheus show is the same
    after a clean restart as before it, on either store."""
    target = str(setup.tmp / "idle.db") if db == "sqlite" else request.getfixturevalue("pg_url")
    first, store = service(setup, "inst-idle-1", open_queue(target))
    with closing(store):
        first.start()
        try:
            first.submit(prepare_pipeline("jobs:\n  a:\n    run: echo a\n", ()), "pipeline")
            wait_until(lambda: _status(store, "s1.a") == "passed", 60, "a to pass")
            wait_until(lambda: first.servers_held == 1, 10, "the server kept warm")
            setup.clock.advance(600)  # ten minutes idle, going on at the stop
            first.wake()
            before = first.idle_rows()
        finally:
            first.stop()
    ((_, gpu, usd, seconds),) = before
    assert "3090" in gpu and seconds >= 600 and usd > 0
    setup.clock.advance(5)  # a restart takes seconds: the API's rate limits hold across it
    second, store = service(setup, "inst-idle-2", open_queue(target))
    with closing(store):
        second.start()
        try:
            assert second.idle_rows() == before
            assert second.placing.book.idle_today_usd(setup.clock.time()) >= usd  # budgeted
        finally:
            second.stop()


def test_a_kill_9_loses_at_most_a_minute_of_an_idle_stretch_going_on(setup: Setup) -> None:
    """The loop may sleep an hour with nothing to do: it is woken to write a stretch going on
    (here every 0.05 s of real time; a minute of the fake clock makes the write due)."""
    first, store = service(setup, "inst-idle-9")
    first.options.idle_wake_s = 0.05
    first.start()
    first.submit(prepare_pipeline("jobs:\n  a:\n    run: echo a\n", ()), "pipeline")
    wait_until(lambda: _status(store, "s1.a") == "passed", 60, "a to pass")
    wait_until(lambda: first.servers_held == 1, 10, "the server kept warm")
    setup.clock.advance(300)  # five idle minutes: no event of the loop's own comes
    wait_until(lambda: store.idle_money(0), 10, "the stretch going on written")
    # kill -9: the loop stops, nothing is handed over or given back, no stop is recorded.
    first._stopping.set()
    first.driver.quit()
    first._thread.join(10)
    ((_, gpu, _, seconds),) = store.idle_money(0)
    assert "3090" in gpu and seconds >= 300
    setup.clock.advance(5)
    second, _ = service(setup, "inst-idle-10")
    second.start()  # cancels the dead one's warm server through the ledger
    try:
        ((_, _, _, shown),) = [(d, g, u, s) for d, g, u, s in second.idle_rows()]
        assert shown == seconds
    finally:
        second.stop()


def _status(store: QueueStore, job_id: str) -> str:
    found = store.job(job_id)
    return found[0].status if found is not None else ""
