"""A warm server when serve dies: in the ledger like any rental, so the next start (or
`clore-run cleanup`) cancels it; never adopted (its last job's leftovers and its trust domain
are not known any more)."""

from __future__ import annotations

from pathlib import Path

from runner.backends.clore.cleanup import reconcile
from runner.core.model import Pipeline
from runner.core.warm_policy import WarmPolicy
from runner.serve.service import Service, ServiceOptions
from runner.serve.submit import prepare_pipeline
from runner.stores.queue.sqlite import SqliteQueue
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.serve.harness import wait_until

KEEP_15 = WarmPolicy(keep_warm_s=900.0)


def service(setup: Setup, instance: str) -> tuple[Service, SqliteQueue]:
    backend, ledger = setup.backend(Pipeline(name="serve", jobs=(), concurrency=2), instance)
    client = backend.client  # one client, one rate limiter, as `serve` has

    def cancel_through_the_ledger(tokens: set[str]) -> str:
        for token in sorted(tokens):
            reconcile(ledger, client, dry_run=False, run_id=token, settle_s=0.0)
        return "reconciled"

    store = SqliteQueue(setup.tmp / "queue.db")
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
