"""The Clore run's side of the host history (what each rent's end writes) and of hedging (what
the winning attempt's facts say), without the API."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.backends.clore.hedge_log import HedgeLog
from runner.backends.clore.host_memory import HostRecorder
from runner.backends.clore.rental import NeverOnline, ProvisionCancelled, Rental, SshNeverAnswered
from runner.core.rentals import Quote, RentServer
from runner.stores.hosts import HostHistoryError, open_hosts
from tests.backends.clore.test_market import offer
from tests.stores.conftest import Tick


def test_each_rents_end_is_written_as_the_hosts_event(tmp_path: Path) -> None:
    clock = Tick()
    with open_hosts(tmp_path / "hosts.db", clock=clock) as history:
        recorder = HostRecorder(history, "run-1", clock)
        rental = Rental(1, "a", offer(88028), 2.0, "USD-Blockchain", 0.0875)
        rental.facts["ssh_ready_after_s"] = "41.5"
        recorder.up(rental)
        recorder.failed(100201, NeverOnline("order 7 not online after 360 s"))
        recorder.failed(100302, SshNeverAnswered("sshd never answered"))
        recorder.failed(100504, ProvisionCancelled("cancelled"))  # ours: not the host's
        recorder.lost(88028)
        kinds = [(e.host, e.kind, e.boot_s, e.run_id) for e in history.events()]
    assert kinds == [
        ("88028", "up", 41.5, "run-1"),
        ("100201", "never_up", None, "run-1"),
        ("100302", "ssh_failed", None, "run-1"),
        ("88028", "preempted", None, "run-1"),
    ]


def test_without_a_history_nothing_is_kept_and_the_memory_is_empty() -> None:
    recorder = HostRecorder(None)
    recorder.failed(1, NeverOnline("x"))
    assert recorder.memory().hosts == {}
    recorder.close()


class Broken:
    """A history whose every read and write fails (a damaged file)."""

    def memory(self) -> object:
        raise HostHistoryError("host history /x/hosts.db: cannot read: disk I/O error")

    def record(self, event: object) -> None:
        raise HostHistoryError("host history /x/hosts.db: cannot write: disk I/O error")

    def close(self) -> None:
        pass


def test_a_failing_history_is_said_once_and_the_run_goes_on() -> None:
    said: list[str] = []
    recorder = HostRecorder(Broken(), "r", say=said.append)  # type: ignore[arg-type]
    recorder.failed(1, NeverOnline("x"))
    recorder.failed(2, NeverOnline("x"))
    assert recorder.memory().hosts == {}
    assert said == [
        "warning: the host history is not kept this run: "
        "host history /x/hosts.db: cannot write: disk I/O error"
    ]


def _rent(server: int, hedge_of: int | None = None) -> RentServer:
    return RentServer(server, Quote(str(server)), "train", 0.2, hedge_of=hedge_of)


def test_the_winning_attempt_says_which_boots_raced_and_what_the_losers_cost() -> None:
    log = HedgeLog()
    log.rented(_rent(1), "RTX 4090 #200001")
    log.rented(_rent(2, hedge_of=1), "RTX 4090 #200002")
    log.given_back(1, "hedge: RTX 4090 #200002 answered SSH first", 0.0031)
    log.given_back(2, "no job waiting can use it within a boot", 0.5)  # not a hedge's loser
    assert log.facts("train", 2) == {
        "boots_given_back": "1",
        "boots_rented": "RTX 4090 #200001; RTX 4090 #200002",
        "hedge": "1 hedge(s): RTX 4090 #200002 answered SSH first; RTX 4090 #200001 given back",
    }
    assert log.cost_facts("train") == {"hedge_cost_usd": "0.003100"}
    assert (log.hedges, log.lost_usd) == (1, pytest.approx(0.0031))
    assert log.facts("train", 2) == {} and log.cost_facts("train") == {}  # said once


def test_a_job_that_raced_no_boot_gets_no_hedge_facts() -> None:
    log = HedgeLog()
    log.rented(_rent(1), "RTX 4090 #200001")
    assert log.facts("train", 1) == {}
    log.given_back(9, "hedge: unknown server", 1.0)  # a server it never rented
    assert log.lost_usd == 0.0


def test_a_closed_recorder_writes_nothing_and_says_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    history = open_hosts(tmp_path / "hosts.db", clock=Tick())
    recorder = HostRecorder(history, "r", say=said.append)
    recorder.close()
    recorder.close()  # the backend's shutdown may run twice
    recorder.failed(1, NeverOnline("x"))  # a rent that ended after the shutdown
    assert said == []
    with open_hosts(tmp_path / "hosts.db") as again:
        assert again.events() == []
