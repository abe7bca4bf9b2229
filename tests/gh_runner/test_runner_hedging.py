"""`runner start` rents as a pipeline job does: a boot that runs late gets a second host beside
it (the first to answer SSH carries the runner, the other is cancelled at once), every create
has its ledger row first, and the host history beside the ledger learns each boot and each
host that failed, for the next start and the next run."""

from __future__ import annotations

import threading

import pytest

from runner.stores.hosts import hosts_target, open_hosts
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.clore_api import FakeClore
from tests.fakes.fast_clock import FastClock
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host
from tests.gh_runner.harness import host as host

DEAD, NEXT = 88028, 100706  # the best RTX offer paid in CLORE-Blockchain, then the next one
SPEED = 40.0  # the hedge is due 120 s into a boot (half the harness's 240 s bound): 3 s here


class RacingClock(FastClock):
    """Real time, faster (a hedge must race the boot it hedges: the fake clock moves only when
    slept on, so a boot polled on it would run to its bound between two looks of the driver
    at the clock), which a test can also move on (`advance`: the user's job, a new process)."""

    def __init__(self) -> None:
        super().__init__(SPEED)
        self._ahead_s = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return super().now() + self._ahead_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ahead_s += seconds


@pytest.fixture
def fake_clock() -> RacingClock:
    return RacingClock()


@pytest.fixture(autouse=True)
def _looser_gaps(fake_clore: FakeClore) -> None:
    # The client spaces its calls 1.1 s apart (5.5 s before a create) on this clock: at 40x a
    # tenth of a second is 2.5 ms of real time, which thread scheduling can eat (as in
    # tests/backends/clore/test_dead_hosts.py). A call made without the limiter still shows.
    fake_clore.MIN_GAP_S, fake_clore.CREATE_GAP_S = 0.5, 4.5


def _rtx_args(host: Host, *extra: str, record: str = "record.json") -> list[str]:
    args = host.start_args("--gpu", "RTX", *extra, record=record)
    args[args.index("USD-Blockchain")] = "CLORE-Blockchain"
    return args


def _history(host: Host) -> dict[str, list[str]]:
    """Per host, the kinds of event the history holds of it."""
    with open_hosts(hosts_target(host.tmp / "ledger.db"), clock=host.clock) as history:
        memory = history.memory()
    kinds = ("ups", "never_up", "ssh_failed", "preempted", "slow")
    return {
        name: [kind for kind in kinds if getattr(rec, kind)] for name, rec in memory.hosts.items()
    }


def _stop(host: Host) -> None:
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output


def test_a_boot_that_runs_late_is_hedged_and_the_loser_cancelled(host: Host) -> None:
    host.fake.never_online.add(DEAD)
    started = host.invoke(_rtx_args(host))
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    assert rental.server_id == NEXT
    creates = [c.body["renting_server"] for c in host.fake.calls("create_order")]
    assert creates == [DEAD, NEXT]  # the hedge went out while the first still booted
    dead = next(o for o in host.fake.orders.values() if o.server_id == DEAD)
    assert not dead.live  # the loser was cancelled at once, inside the creation fee's grace
    assert host.fake.lived_s(dead.id) < 600
    words = " ".join(started.output.split())
    assert "runs late" in words and f"#{NEXT} beside it" in words
    assert "1 hedge(s)" in words and "answered SSH first" in words
    with SqliteLedger(host.tmp / "ledger.db") as ledger:
        rows = {r.server_id: r for r in ledger.rentals(rental.run_id)}
    # Both creates had their row first; the loser's is released, the runner's lives on.
    assert all(r.create_sent_at is not None for r in rows.values())
    assert rows[DEAD].order_id == str(dead.id) and rows[DEAD].state == "released"
    assert rows[NEXT].order_id == str(rental.order_id) and rows[NEXT].state == "running"
    # The loser had not come up when the winner did: remembered as slow, not forgotten.
    assert _history(host) == {str(DEAD): ["slow"], str(NEXT): ["ups"]}
    host.github.wait_for("done", rental.runner_id)
    _stop(host)


def test_without_hedging_the_late_boot_is_waited_for(host: Host) -> None:
    """The test above fails for the right reason: with the policy off, the same dead host
    is waited out to its boot bound before the next one is rented (never beside it)."""
    from runner.core.hedge import NO_HEDGE

    host.hedge = NO_HEDGE
    host.fake.never_online.add(DEAD)
    started = host.invoke(_rtx_args(host))
    assert started.exit_code == 0, started.output
    assert "beside it" not in started.output and "not online after 240 s" in started.output
    dead = next(o for o in host.fake.orders.values() if o.server_id == DEAD)
    assert not dead.live
    assert _history(host) == {str(DEAD): ["never_up"], str(NEXT): ["ups"]}
    _stop(host)


def test_a_host_whose_sshd_never_answers_is_remembered_and_skipped_next_time(
    host: Host,
) -> None:
    host.fake.no_sshd.add(DEAD)
    first = host.invoke(_rtx_args(host, record="first.json"))
    assert first.exit_code == 0, first.output
    (rental,) = host.record("first.json").runners
    assert rental.server_id == NEXT
    assert _history(host) == {str(DEAD): ["ssh_failed"], str(NEXT): ["ups"]}
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "first.json")])
    assert stopped.exit_code == 0, stopped.output

    creates = len(host.fake.calls("create_order"))
    second = host.invoke(_rtx_args(host, record="second.json"))
    assert second.exit_code == 0, second.output
    # The history kept it: the next start does not try the host that failed a minute ago.
    assert [c.body["renting_server"] for c in host.fake.calls("create_order")[creates:]] == [NEXT]
    (again,) = host.record("second.json").runners
    host.github.wait_for("done", again.runner_id)
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "second.json")])
    assert stopped.exit_code == 0, stopped.output
