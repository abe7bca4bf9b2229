"""The fake Clore of one scenario on real (short) time, each host with an sshd of its own.

The fake (tests/fakes/clore_api.py) runs on the real clock here: the runs under test are other
processes with real clocks. Each host of the market is one real sshd on loopback (a pool started
once and reused by every scenario), so a preemption can kill the jobs of that host only, as a
container stopping would. A ticker thread applies what happens at a time rather than on a request:
host preemptions (`FakeClore.tick`) and the scenario's API faults, armed when due.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pytest_httpserver import HTTPServer

from runner.clock import SystemClock
from tests.chaos.scenario import Host, Scenario
from tests.fakes.clore_api import ALL_COINS, FakeClore, FakeOrder, Fault, Faults, _prices, _specs
from tests.sshd_fixture import SshServer, descendants, start_sshd

TICK_S = 0.05
_FAULTS: dict[str, Fault] = {
    "bad_gateway": Faults.BAD_GATEWAY,
    "rate_limited": Faults.RATE_LIMITED,
    "db_error_but_created": Faults.DB_ERROR_BUT_CREATED,
    "cancel_refused_once": Faults.DB_ERROR,
    "server_offline": Faults.SERVER_OFFLINE,
}
_VRAM = {"RTX 4090": 24, "RTX 3090": 24, "A100": 80}


def quiet_server_log() -> None:
    """Werkzeug logs every request of the fake to stderr: hundreds of lines per scenario."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


class RealClock(SystemClock):
    """The fake API on real time: the runs under test keep real time too."""

    def advance(self, seconds: float) -> None:
        raise AssertionError("real time does not jump")


class SshdPool:
    """Real sshds, one per host of a market (host i of any scenario is sshd i)."""

    def __init__(self, folder: Path, count: int = 6) -> None:
        self.servers: list[SshServer] = []
        try:
            for i in range(count):
                # Each host's own bin first: a job that leaves the GPU busy puts an
                # nvidia-smi there that says so (scenario.py, `dirty_gpu`).
                self.servers.append(start_sshd(folder / f"sshd{i}", own_bin=True))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self.servers:
            server.kill_all()

    def new_containers(self) -> None:
        """Before a scenario: what a job of the last one left in a host's own bin (a busy
        GPU's nvidia-smi, when its run was killed before the check read it) is gone, as a
        new order's container would be."""
        for server in self.servers:
            (server.folder / "bin" / "nvidia-smi").unlink(missing_ok=True)

    def stop_sessions(self, index: int) -> None:
        """The host's container stopped: every job on it dies; sshd answers a new container."""
        for pid in descendants(self.servers[index].process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def server_json(host: Host, index: int) -> dict[str, object]:
    model = "A100-SXM4-80GB" if host.gpu == "A100" else host.gpu
    return {
        "id": host.server_id,
        "owner": 5000 + index,
        "mrl": 720,
        "price": _prices(host.usd_per_day, host.spot_usd_per_day),
        "rented": False,
        "specs": _specs(f"1x NVIDIA GeForce {model}", _VRAM[host.gpu], "US"),
        "reliability": 0.99,
        "allowed_coins": ALL_COINS,
        "rating": {"avg": 4.8, "cnt": 20},
        "gpu_array": [f" {model}"],
        "cuda_version": "12.8",
    }


class Market:
    """The scenario's fake Clore, listening on loopback; `start()` the clock of its faults."""

    def __init__(self, scenario: Scenario, sshds: SshdPool) -> None:
        self.scenario = scenario
        self.sshds = sshds
        quiet_server_log()
        self.http = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.http.start()
        hosts = list(scenario.hosts)
        self.index = {h.server_id: i for i, h in enumerate(hosts)}
        servers = [server_json(h, i) for i, h in enumerate(hosts)]
        self.fake = FakeClore(self.http, RealClock(), servers=servers)  # type: ignore[arg-type]
        self.fake.refused_currencies = {}
        self.fake.enforce_rate_limits = False  # the runs' pacing is shortened (entry.py)
        appear = scenario.appear_after_s
        self.fake.appear_after_s = min(0.3, scenario.boot_s) if appear is None else appear
        self.fake.online_after_s = scenario.boot_s
        self.fake.cancel_lag_s = scenario.cancel_lag_s
        self.fake.ssh_host = "127.0.0.1"
        self.fake.port_for = self._port
        self.fake.after_create = self._authorize
        self.fake.on_container_stop = self._stop_container
        for host in hosts:
            if host.fault == "never_online":
                self.fake.never_online.add(host.server_id)
            elif host.fault == "sshd_late":
                self.fake.sshd_late_s[host.server_id] = host.fault_s
            elif host.fault in ("preempt", "outbid"):
                kind = "end" if host.fault == "preempt" else "outbid"
                self.fake.preempt_after_s[host.server_id] = (host.fault_s, kind)
        self.fake.mrl_hours_by_server = dict(scenario.host_lengths)
        self.fake.ends_after_s = {h: (t, "host-gone") for h, t in scenario.host_ends}
        self.fake.echo_order_end = scenario.order_end_echo
        self.fake.completed_spend = scenario.completed_spend
        # Orders live seconds here: stamps in whole seconds would be off by a third of one.
        self.fake.whole_second_stamps = False
        # Slow pulls: the container deploys (mon_container 0/1) this long after it is online.
        self.fake.pull_s_by_server = dict(scenario.pulls_s)
        self.fake.tag_echo = scenario.tag_echo
        self.fake.echo_spot = scenario.echo_spot
        self.fake.ct_late_s = scenario.ct_late_s
        self.fake.reply_delay_s = dict(scenario.reply_delay_s)
        self.fake.market_lag_s = scenario.market_lag_s
        self.fake.install()
        self._stop = threading.Event()
        self._healed = False
        self._ticker: threading.Thread | None = None

    def url(self, caller: str) -> str:
        return self.fake.url_for_caller(caller)

    def _port(self, order: FakeOrder) -> int:
        return self.sshds.servers[self.index[order.server_id]].port

    def _authorize(self, order: FakeOrder) -> None:
        """What Clore does with the order's `ssh_key`: the container lets that key in."""
        if order.ssh_key:
            self.sshds.servers[self.index[order.server_id]].authorize(order.ssh_key)

    def _stop_container(self, order: FakeOrder) -> None:
        self.sshds.stop_sessions(self.index[order.server_id])

    def start(self) -> None:
        """The scenario's clock starts: faults are armed from now, preemptions come when due."""
        started = time.monotonic()
        pending = sorted(self.scenario.api_faults, key=lambda f: f.at_s)

        def tick() -> None:
            while not self._stop.wait(TICK_S):
                while self._healed and pending:
                    pending.pop()
                while pending and time.monotonic() - started >= pending[0].at_s:
                    fault = pending.pop(0)
                    self.fake.fail_next(fault.endpoint, _FAULTS[fault.name], fault.times)
                self.fake.tick()

        self._ticker = threading.Thread(target=tick, name="chaos-ticker", daemon=True)
        self._ticker.start()

    def heal(self) -> None:
        """No more faults from now: those armed and not yet answered, and those to come."""
        self._healed = True
        self.fake.clear_faults()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
        with contextlib.suppress(Exception):
            self.http.clear()
        self.http.stop()


@contextlib.contextmanager
def market(scenario: Scenario, sshds: SshdPool) -> Iterator[Market]:
    built = Market(scenario, sshds)
    try:
        yield built
    finally:
        built.close()
