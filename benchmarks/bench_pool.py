"""Budget pools on a private PostgreSQL cluster (loopback), in processes of their own.

    python -m benchmarks.bench_pool [--quick]

Prints:
- reservations per second on one pool (4 servers) with 20 contenders, each reserving and
  settling in a loop, and the p50/p99 latency of one reservation transaction (refusals of a
  full pool included: a waiting contender polls every 1-20 ms); against 1 contender doing the
  same (the baseline, measured in this run); and the 20 on a pool of 20 servers, where none
  waits;
- the time from a holder's `kill -9` to its servers cancelled by a reaper polling every 0.25 s,
  against the lease's ttl (the floor: the lease must expire first).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_httpserver import HTTPServer
from werkzeug.serving import WSGIRequestHandler

from runner.backends.clore.reaper import reap
from runner.stores.ledger.postgres import PostgresLedger
from runner.stores.pools.postgres import PostgresPools
from tests.fakes.clore_api import FakeClore
from tests.fakes.fake_clock import START_UNIX, FakeClock
from tests.pg_fixture import PgCluster, start_cluster
from tests.stores.pools.test_processes import Worker


def contenders(
    cluster: PgCluster, n: int, cycles: int, servers: int = 4
) -> tuple[float, float, float]:
    """(reservations/s, p50 ms, p99 ms) for `n` processes on one pool of `servers`."""
    url = cluster.new_database()
    PostgresPools(url).create("bench", 1e9, per_day=False, max_servers=servers)
    workers = [Worker("cycle", url, "bench", f"c{i}", str(cycles)) for i in range(n)]
    try:
        for w in workers:
            w.expect("ready")
        began = time.perf_counter()
        for w in workers:
            w.say("go")
        results = [json.loads(w.expect(timeout=600)) for w in workers]
        wall = time.perf_counter() - began
    finally:
        for w in workers:
            w.stop()
    latencies = sorted(x for r in results for x in r["latencies"])
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return n * cycles / wall, statistics.median(latencies) * 1000, p99 * 1000


def death_to_cancel(cluster: PgCluster, ttl_s: float) -> float:
    """Seconds from a holder's kill -9 to the fake Clore listing none of its orders live."""
    url = cluster.new_database()
    PostgresPools(url).create("bench", 100.0, per_day=False, max_servers=4)
    server = HTTPServer(threaded=True)
    server.start()
    try:
        fake = FakeClore(server, FakeClock()).install()
        # Replies' Date header on the fake clock, as the tests' fixture does: the ownership
        # check measures the API's clock offset from it.
        WSGIRequestHandler.date_time_string = fake.date_header  # type: ignore[method-assign,assignment]
        fake.enforce_rate_limits, fake.appear_after_s = False, 0.0
        fake.balances["CLORE-Blockchain"] = 1e12
        for n in range(2):
            fake.servers[5000 + n] = {**copy.deepcopy(fake.servers[99173]), "id": 5000 + n}
        holder = Worker(
            "hold", url, "bench", "run-dead", fake.url, str(START_UNIX), str(ttl_s), "5000", "5001"
        )
        holder.expect("ready")
        holder.say("go")
        holder.expect("holding")
        pools, ledger, client = PostgresPools(url), PostgresLedger(url), fake.client()
        holder.proc.send_signal(signal.SIGKILL)
        died = time.perf_counter()
        holder.stop()
        while fake.live_orders():
            reap(pools, ledger, client, "bench-reaper", settle_s=0)
            time.sleep(0.25)  # a reaper's poll interval, the thing being measured
        return time.perf_counter() - died
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer cycles, for CI")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the fake's request lines
    cycles = 20 if args.quick else 100
    folder = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    folder.chmod(0o755)
    cluster = start_cluster(folder / "cluster")
    try:
        base_rate, base_p50, base_p99 = contenders(cluster, 1, cycles)
        rate, p50, p99 = contenders(cluster, 20, cycles)
        free_rate, free_p50, free_p99 = contenders(cluster, 20, cycles, servers=20)
        print(
            f"reservations, 1 contender : {base_rate:7.0f}/s  p50 {base_p50:6.2f} ms  "
            f"p99 {base_p99:6.2f} ms"
        )
        print(
            f"reservations, 20 contenders: {rate:7.0f}/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
            f"  (throughput x{rate / base_rate:.2f}, p99 x{p99 / base_p99:.2f} of 1 contender)"
        )
        # The same 20 with a server each: nobody waits and polls, so what is left is the pool
        # row's own serialisation (and the machine's CPUs).
        print(
            f"  ... 20 servers, no waiting: {free_rate:7.0f}/s  p50 {free_p50:6.2f} ms  "
            f"p99 {free_p99:6.2f} ms  (p99 x{free_p99 / base_p99:.2f} of 1 contender)"
        )
        ttl = 3.0
        took = death_to_cancel(cluster, ttl)
        print(
            f"holder kill -9 -> servers cancelled: {took:.2f} s with a {ttl:g} s lease "
            f"(x{took / ttl:.2f} of the ttl)"
        )
    finally:
        cluster.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
