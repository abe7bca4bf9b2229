"""Three `clore-run serve --backend clore` processes on one PostgreSQL queue and ledger, renting
from the fake Clore API (servers are the loopback sshd). The one holding a rental mid-job is
killed with SIGKILL: one of the other two takes its lease over (they race for it), cancels the
dead one's order exactly once through the shared ledger, and retries the job once, on a rental
of its own, where it passes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from runner.clock import SystemClock
from runner.stores.ledger import Rental
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_api import API_KEY, FakeClore, FakeOrder
from tests.serve.harness import _ENTRY, FINAL, ServeProcess, start_serves, wait_until
from tests.sshd_fixture import SshServer

# The serve processes' Clore client without the real API's pacing (1 call per 1.1 s, a create
# per 5.5 s): the fake does not enforce it, and the test would wait out a minute of gaps.
_UNPACED = (
    "from runner.backends.clore import api, ratelimit; "
    "_env = api.CloreClient.from_env.__func__; "
    "api.CloreClient.from_env = classmethod(lambda cls, environ=None, **kw: _env(cls, environ, "
    "limiter=ratelimit.RateLimiter(min_interval_s=0.0, create_interval_s=0.0), **kw)); "
)


class RealClock(SystemClock):
    """The fake API on real time: the serve processes keep real time too."""

    def advance(self, seconds: float) -> None:
        raise AssertionError("real time does not jump")


@pytest.mark.parametrize("pool", [None, "gpu"], ids=["no-pool", "pool"])
def test_a_serve_killed_holding_a_clore_rental_is_taken_over_and_its_order_cancelled_once(
    tmp_path: Path, pg_url: str, httpserver: HTTPServer, sshd_killable: SshServer, pool: str | None
) -> None:
    """With a pool too: the job is claimed with a server slot, its rental takes the slot over,
    and the taker reaps the dead instance's pool lease at once (its servers and money back)."""
    fake = FakeClore(httpserver, RealClock()).install()  # type: ignore[arg-type]
    fake.enforce_rate_limits = False
    fake.appear_after_s = fake.online_after_s = 0.0
    fake.ssh_host, fake.ssh_port = "127.0.0.1", sshd_killable.port

    def authorize(order: FakeOrder) -> None:  # what Clore does with the order's `ssh_key`
        if order.ssh_key:
            sshd_killable.authorize(order.ssh_key)

    fake.after_create = authorize
    env = {"CLORE_API_KEY": API_KEY, "CLORE_API_URL": fake.url}
    common = (
        "--backend", "clore", "--coordinator", pg_url, "--concurrency", "1",
        "--lease-ttl", "2", "--data-dir", str(tmp_path / "d"),
    )  # fmt: skip
    job = f"""
jobs:
  long:
    timeout-minutes: 5
    workspace: false
    run: |
      echo $$ >> {tmp_path}/long.starts
      while [ ! -e {tmp_path}/gate ]; do sleep 0.02; done
"""
    if pool is not None:
        with PostgresPools(pg_url) as admin:
            admin.create(pool, 50.0, per_day=False, max_servers=2)
        common = (*common, "--pool", pool)
    servers: list[ServeProcess] = []
    try:
        servers = start_serves(3, pg_url, *common, entry=_UNPACED + _ENTRY, env=env)
        (job_id,) = servers[0].api.submit(job)
        running = servers[0].api.wait_status(job_id, {"running"}, 60)
        holder = running["attempt_list"][0]["instance"]
        victim = next(s for s in servers if s.instance == holder)
        taker = next(s for s in servers if s is not victim)  # to ask; either may take over
        wait_until(lambda: _lines(tmp_path / "long.starts"), 30, "the job to start")
        (first_order,) = [o.id for o in fake.live_orders()]
        victim.kill()

        lost = wait_until(
            lambda: next((a for a in taker.api.job(job_id)["attempt_list"] if a["failure"]), None),
            timeout=30,
            what="the take-over",
        )
        assert (lost["instance"], lost["failure"]) == (victim.instance, "server_lost")
        assert "cancelled" in lost["message"]  # its rental, through the ledger
        assert first_order not in [o.id for o in fake.live_orders()]
        wait_until(lambda: len(_lines(tmp_path / "long.starts")) == 2, 30, "the retry to start")
        (tmp_path / "gate").touch()
        done = taker.api.wait_status(job_id, FINAL, 30)
        assert done["status"] == "passed"
        first, second = done["attempt_list"]  # requeued once: the lost attempt, one retry
        assert first["instance"] == victim.instance
        assert second["instance"] != victim.instance and second["failure"] is None
        for server in servers:
            if server is not victim:
                assert server.terminate() == 0  # each gives its own rental back
    finally:
        (tmp_path / "gate").touch()
        for server in servers:
            if server.proc.poll() is None:
                server.terminate()
    cancels = Counter(r.body["id"] for r in fake.calls("cancel_order") if r.code == 0)
    assert cancels[first_order] == 1  # the dead one's order: cancelled once, by the taker
    assert set(cancels) == set(fake.orders) and set(cancels.values()) == {1}
    assert fake.live_orders() == []
    rentals = _rentals(pg_url, victim.instance)
    assert [(r.order_id, r.state) for r in rentals if r.order_id] == [(first_order, "released")]
    assert fake.violations == []
    if pool is not None:
        _pool_is_empty(pg_url, pool, victim.instance)


def _pool_is_empty(url: str, pool: str, dead: str) -> None:
    """Every slot and reservation settled, the dead one's by the taker, and never more than
    the pool's two servers at once (replayed from the events numbered under its lock)."""
    with PostgresPools(url) as pools:
        usage = pools.usage(pool)
        assert (usage.servers, usage.reserved_usd, usage.holders) == (0, 0.0, 0)
        held = pools.reservations(dead, unsettled=False)
        assert held and all(r.settled for r in held)
        rental = [r for r in held if r.rental_id is not None]
        assert rental and all(r.billed_usd and r.billed_usd > 0 for r in rental)
        servers = peak = 0
        for event in pools.events(pool):
            servers += {"reserve": 1, "grow": 0, "settle": -1}[event.kind]
            peak = max(peak, servers)
        assert peak <= 2 and servers == 0


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _rentals(url: str, run_id: str) -> list[Rental]:
    with PostgresLedger(url) as ledger:
        return list(ledger.rentals(run_id))
