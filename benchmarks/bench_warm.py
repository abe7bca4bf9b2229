"""Warm servers in `clore-run serve`: a CI job's wait for its GPU, cold against warm.

    python benchmarks/bench_warm.py [--quick]

On the fake Clore (a 30 s boot, create -> online, on a clock running at 10x real time; the
servers are a real sshd on loopback) with serve in this process over its REST API:

1. one job submitted cold (no server held), then the same job again on the warm server the
   first left (--keep-warm 15): seconds from the submission to the job's first output line
   and to its end, on the fake's clock, and warm/cold (goal <= 0.1); serve's own overhead on
   the warm server (submission to first output, in real seconds: goal <= 2 s);
2. ten submissions in a row, each after the last ended: the orders made (goal 1);
3. idle spend against --idle-budget: a synthetic day (the core's simulation, fake clock) with
   a pool kept warm 08:00-20:00 UTC under budgets of $0.50, $1 and $5 a day;
4. the table `clore-run warmth` prints, for that synthetic day.

`--quick`: three submissions in a row instead of ten, one idle budget. Figures are printed,
not asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer

from benchmarks.fake_market import fake_market
from runner.backends.base import NO_STAGES, OutputSink, Place, RunOutcome, RunRequest, StageSink
from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.rental import ProvisionOptions
from runner.backends.clore.settings import CloreSettings
from runner.backends.ssh.connection import ConnectOptions
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.core.model import GpuAsk, Job, Pipeline
from runner.core.rentals import Quote
from runner.core.simulate_queue import Arrival, simulate_queue
from runner.core.warm_policy import WarmPolicy, WarmPool, Window
from runner.serve.what_if import History, table, what_if
from runner.stores.ledger.sqlite import SqliteLedger
from tests.fakes.fast_clock import SPEED, FastClock
from tests.serve.harness import FINAL, thread_server
from tests.sshd_fixture import start_sshd

BOOT_S = 30.0
KEEP = WarmPolicy(keep_warm_s=900.0)
DAY_S = 86_400.0
T0 = 20_000 * DAY_S  # a Friday, 00:00 UTC


class FirstOutput(CloreBackend):
    """Notes the clock time of each job's first output."""

    first: dict[str, float]

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        seen, job_id, clock = self.first, request.job.id, self.clock

        class Watch:
            def write(self, stream: Any, data: bytes) -> None:
                seen.setdefault(job_id, clock.time())
                sink.write(stream, data)

        return super().run(place, request, Watch(), cancel, stages)


def backend(tmp: Path, http: HTTPServer, ssh_port: int, authorize: Any) -> tuple[Any, ...]:
    http.clear()
    clock = FastClock()
    fake = fake_market(http, clock, ssh_port)
    fake.online_after_s = BOOT_S
    client = fake.client()
    key = ClientKey.generate()
    authorize(key.public_line)
    settings = CloreSettings.of(Pipeline(name="serve", jobs=()))
    options = ProvisionOptions(
        first_poll_s=1.0,
        max_poll_s=2.0,
        pause=clock.pause,
        ssh=ConnectOptions(tries=3, backoff_s=0.05, max_backoff_s=0.2),
    )
    ledger = SqliteLedger(tmp / f"ledger-{time.monotonic_ns()}.db")
    provisioner = Provisioner(
        client, ledger, "bench-warm", key, HostKeyStore(), clock, settings.currency, options
    )
    made = FirstOutput(client, provisioner, clock, settings)
    made.first = {}
    return made, fake, clock


def submit_and_wait(srv: Any, clock: FastClock, n: int) -> dict[str, float]:
    asked_at, real_at = clock.time(), time.perf_counter()
    (job_id,) = srv.api.submit(f"jobs:\n  j{n}:\n    run: echo hello {n}\n")
    job = srv.api.wait_status(job_id, FINAL, timeout=120)
    assert job["status"] == "passed", job
    first = srv.service.backend.first[job_id]
    ended = dt.datetime.fromisoformat(job["finished_at"].replace("Z", "+00:00")).timestamp()
    return {
        "first_output_s": first - asked_at,
        "end_s": ended - asked_at,
        "first_output_real_s": (first - asked_at) / SPEED,
        "real_total_s": time.perf_counter() - real_at,
    }


def cold_and_warm(tmp: Path, http: HTTPServer, sshd: Any, rounds: int) -> None:
    made, fake, clock = backend(tmp, http, sshd.port, sshd.authorize)
    with thread_server(tmp / "q1", capacity=2, clock=clock, backend=made, warmth=KEEP) as srv:
        cold = submit_and_wait(srv, clock, 0)
        warm = submit_and_wait(srv, clock, 1)
        for n in range(2, rounds):
            submit_and_wait(srv, clock, n)
        stats = srv.api.get("/stats").json()
    print(f"1. one job, the fake's {BOOT_S:g} s boot, clock at {SPEED:g}x (clock seconds)")
    print("            submit -> first output   submit -> end")
    for label, m in (("cold", cold), ("warm", warm)):
        print(f"   {label:6}  {m['first_output_s']:20.2f} s  {m['end_s']:12.2f} s")
    print(
        f"   warm/cold: first output {warm['first_output_s'] / cold['first_output_s']:.3f}, "
        f"end {warm['end_s'] / cold['end_s']:.3f}   (goal <= 0.1)"
    )
    print(
        f"   serve's own overhead on the warm server (submit -> first output, real time): "
        f"{warm['first_output_real_s']:.3f} s   (goal <= 2 s)"
    )
    print(f"2. {rounds} submissions in a row (--keep-warm 15): {len(fake.orders)} order(s)")
    print(f"   idle money in serve's /stats: ${stats['idle_usd_today']:.6f} today")


def synthetic_day(seed: int = 3) -> list[Arrival]:
    """A team's CI day: bursts in working hours, a few jobs at night, a fork's PRs."""
    rng = random.Random(seed)
    arrivals, at, n = [], T0 + 7 * 3600, 0
    while at < T0 + DAY_S:
        hour = (at - T0) / 3600
        busy = 8 <= hour < 19
        at += rng.expovariate(1 / (300 if busy else 3600))
        n += 1
        trust = "repo-team.app" if rng.random() < 0.8 else f"fork-pr-some.fork-{n % 4}"
        job = Job(f"j{n}", f"j{n}", "pytest", gpu=GpuAsk(type="4090"), trust=trust, timeout_s=3600)
        arrivals.append(Arrival(at, job, rng.uniform(60, 600)))
    return arrivals


OFFERS = tuple(Quote(f"h{i}", "RTX 4090", 1, 0.40 + i / 100) for i in range(12))
WORK_HOURS = Window(frozenset(range(5)), 8 * 3600, 20 * 3600)


def idle_budgets(quick: bool) -> None:
    arrivals = synthetic_day()
    print(f"3. idle spend against --idle-budget: a synthetic day, {len(arrivals)} jobs, ")
    print("   --warm '4090:2@Mon-Fri 08:00-20:00 UTC' --keep-warm 15 (core simulation)")
    for budget in (1.0,) if quick else (0.5, 1.0, 5.0):
        policy = WarmPolicy(900.0, (WarmPool("4090", 2, WORK_HOURS),), budget)
        r = simulate_queue(arrivals, OFFERS, policy, cap=4, boot_s=BOOT_S)
        print(
            f"   budget ${budget:.2f}/day: idle ${r.idle_usd:.2f}, warm starts "
            f"{r.warm_starts}/{len(r.waits_s)}, orders {r.orders}, cost ${r.cost_usd:.2f}"
        )


def warmth_table() -> None:
    history = History(tuple(synthetic_day()), OFFERS, BOOT_S, False)
    asked = WarmPolicy(900.0, (WarmPool("4090", 2, WORK_HOURS),), 2.0)
    print("4. `clore-run warmth` on the synthetic day (cap 4):")
    for line in table(what_if(history, asked, 4)).splitlines():
        print(f"   {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="for CI: fewer rounds")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("clore_run").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp_name, HTTPServer() as http:
        tmp = Path(tmp_name)
        sshd = start_sshd(tmp / "sshd")
        try:
            cold_and_warm(tmp, http, sshd, 3 if args.quick else 10)
        finally:
            sshd.stop()
    idle_budgets(args.quick)
    warmth_table()


if __name__ == "__main__":
    main()
