"""The queue server (`clore-run serve`, local backend) as a client sees it, over loopback HTTP.

    python benchmarks/bench_serve.py [--queued 10000] [--samples 500] [--starts 30]
    python benchmarks/bench_serve.py --quick    # 200 queued, a few samples

Starts the server in a subprocess on a fresh --db and reports:

- submit-to-start latency with a free slot: POST /jobs of one `true` job, from just before the
  request to the attempt's start as the server recorded it (same machine, same clock), p50/p99;
- the time to queue --queued jobs (10 pipelines, each one request), held by a far `not-before`
  so they stay queued;
- GET /jobs latency p50/p99 with that many queued: the first page (100), a page deep in the
  queue (`after` near the end), and `status=queued`; GET /jobs/{id} and GET /stats too;
- the server's resident memory (VmRSS) idle and with the queue full;
- throughput: jobs started per second (`true` jobs, --concurrency 4 per instance) with
  --queued jobs waiting, for one server on SQLite (the baseline), then 1 and 3 instances on one
  PostgreSQL queue (a private cluster on loopback, skipped where none can start). Measured over
  the first --window starts, from the starts the store recorded.

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import requests

ENTRY = (
    "import sys; from runner.cli import app, main; from runner.cli.serve import register; "
    "register(app); main(sys.argv[1:])"
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        out.append(time.perf_counter() - began)
    return out


def report(label: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"  {label:<34} p50 {pct(ms, 0.5):7.2f} ms   p99 {pct(ms, 0.99):7.2f} ms")


def start(db: Path, token: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "serve", "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "CLORE_RUN_TOKEN": token},
    )
    assert proc.stdout is not None
    match = re.search(r"listening on (http://\S+)", proc.stdout.readline())
    if match is None:
        proc.kill()
        sys.exit("the server did not start")
    return proc, match.group(1)


def submit_to_start(http: requests.Session, url: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        began = time.time()
        reply = http.post(f"{url}/jobs", json={"id": f"probe{i}", "run": "true"}, timeout=30)
        (job_id,) = reply.json()["ids"]
        while True:  # bounded by the job's own 60 min timeout, in practice milliseconds
            job = http.get(f"{url}/jobs/{job_id}", timeout=30).json()
            if job["started_at"] is not None and job["status"] != "running":
                break
        out.append(datetime.fromisoformat(job["started_at"]).timestamp() - began)
    return out


def fill(http: requests.Session, url: str, total: int) -> float:
    per = max(1, total // 10)
    began = time.perf_counter()
    for batch in range(0, total, per):
        jobs = "".join(
            f"  j{i}:\n    not-before: 2099-01-01T00:00:00Z\n    run: 'true'\n"
            for i in range(batch, min(total, batch + per))
        )
        reply = http.post(
            f"{url}/pipelines",
            data=f"jobs:\n{jobs}".encode(),
            headers={"Content-Type": "application/yaml"},
            timeout=120,
        )
        assert reply.status_code == 201, reply.text[:500]
    return time.perf_counter() - began


def queue_up(target: str | Path, total: int) -> None:
    """`total` jobs straight into the store, 10 submissions, before any server starts."""
    from runner.serve.submit import prepare_pipeline, with_server_ids
    from runner.stores.queue import open_queue

    store = open_queue(target)
    per = max(1, total // 10)
    try:
        for batch in range(0, total, per):
            names = range(batch, min(total, batch + per))
            prepared = prepare_pipeline(
                "jobs:\n" + "".join(f"  j{i}:\n    run: 'true'\n" for i in names), []
            )
            jobs = prepared.jobs
            store.submit("pipeline", "bench", partial(with_server_ids, jobs), time.time())
    finally:
        store.close()


def start_times(target: str | Path) -> tuple[int, list[float]]:
    """Jobs not queued any more, and the first start of each that started."""
    from runner.stores.queue import open_queue

    store = open_queue(target)
    try:
        counts = store.counts()
        started, after = [], 0
        while rows := store.jobs(None, after, 1000):
            started += [r.first_started_at for r in rows if r.first_started_at is not None]
            after = rows[-1].seq
        return sum(counts.values()) - counts["queued"], sorted(started)
    finally:
        store.close()


def throughput(
    target: str | Path, instances: int, queued: int, window: int, token: str, tmp: Path
) -> float:
    """Jobs started per second over the first `window` starts, `queued` waiting."""
    queue_up(target, queued)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                ENTRY,
                "serve",
                "--port",
                "0",
                "--db",
                str(target),
                "--concurrency",
                "4",
                "--data-dir",
                str(tmp / f"data{n}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "CLORE_RUN_TOKEN": token},
        )
        for n in range(instances)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if "listening on" not in proc.stdout.readline():
                sys.exit("a server did not start")
        deadline = time.monotonic() + 600
        while start_times(target)[0] < window and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
    times = start_times(target)[1][:window]
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def report_throughput(queued: int, window: int, token: str, tmp: Path) -> None:
    print(f"throughput: jobs started per second, {queued} queued, first {window} starts")
    base = throughput(tmp / "alone.db", 1, queued, window, token, tmp)
    print(f"  1 server, SQLite (baseline)        {base:8.1f} /s")
    try:
        from tests.pg_fixture import start_cluster

        cluster = start_cluster(tmp / "pg")
    except BaseException as exc:  # pytest.skip: no PostgreSQL here
        print(f"  PostgreSQL: skipped ({exc})")
        return
    try:
        for n in (1, 3):
            rate = throughput(cluster.new_database(), n, queued, window, token, tmp)
            print(f"  {n} instance(s), one PostgreSQL queue {rate:8.1f} /s  (x{rate / base:.2f})")
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=2_000, help="starts measured")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    if args.quick:
        args.queued, args.samples, args.starts, args.window = 200, 20, 3, 100
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(Path(tmp) / "queue.db", token)
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        try:
            idle = rss_mib(proc.pid)
            starts = submit_to_start(http, url, args.starts)
            print(f"clore-run serve, local backend, {url}")
            report(f"submit-to-start ({args.starts} jobs)", starts)
            took = fill(http, url, args.queued)
            print(f"  queued {args.queued} jobs in 10 requests: {took:.2f} s")
            newest: dict[str, str | int] = {"status": "queued", "limit": 1}
            last = http.get(f"{url}/jobs", params=newest).json()
            deep = last["jobs"][0]["id"]
            seq_near_end = args.starts + args.queued - 200
            report(
                "GET /jobs (first page of 100)",
                timed(lambda: http.get(f"{url}/jobs"), args.samples),
            )
            report(
                "GET /jobs?after=<near the end>",
                timed(
                    lambda: http.get(f"{url}/jobs", params={"after": seq_near_end}), args.samples
                ),
            )
            report(
                "GET /jobs?status=queued",
                timed(lambda: http.get(f"{url}/jobs", params={"status": "queued"}), args.samples),
            )
            report("GET /jobs/{id}", timed(lambda: http.get(f"{url}/jobs/{deep}"), args.samples))
            report("GET /stats", timed(lambda: http.get(f"{url}/stats"), args.samples // 5))
            full = rss_mib(proc.pid)
            print(f"  server RSS: {idle:.1f} MiB idle, {full:.1f} MiB with {args.queued} queued")
            print(f"  ({statistics.mean(starts) * 1000:.1f} ms mean submit-to-start)")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the cluster may run as the `postgres` user
        report_throughput(args.queued, args.window, token, Path(tmp))


if __name__ == "__main__":
    main()
