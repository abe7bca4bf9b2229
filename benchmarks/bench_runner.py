"""`runs-on` a rented GPU: how long `runner start` takes to a runner online, and `runner stop`
to the server cancelled, beyond the server's own boot. Loopback only.

    python -m benchmarks.bench_runner [--quick] [--rounds N]

Each round, in this process, as tests/gh_runner does it: `clore-run runner start` (the CLI,
wired to the fake Clore with its orders on a real sshd and to the fake GitHub with its
stand-in runner package, installed by the real install path), the stand-in runner connects to
the fake GitHub and runs its one job, then `clore-run runner stop` from the record. The fake's
boot (create -> online, 30 s) and the API's pacing are on the fake clock: the wall times below
are what is left, ours (market, create, SSH, install, registration, stop's proof and cancel).

Prints per round and the median: start -> JIT registration made, start -> runner online on
the fake GitHub, start -> command returned; stop -> order cancelled on the fake, stop ->
command returned; and the orders created against those still live after the stops (must be
0). `--quick` (CI): one round; 5 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from pytest_httpserver import HTTPServer

from benchmarks.fake_market import fake_market
from tests.fakes.fake_clock import FakeClock
from tests.fakes.github_runners import FakeRunnersGitHub
from tests.gh_runner.harness import Host, kill_runner
from tests.sshd_fixture import SshServer, start_sshd

BOOT_S = 30.0  # the fake's create -> online, on its clock (FakeClore.online_after_s)


def one_round(n: int, tmp: Path, sshd: SshServer) -> dict[str, float]:
    with (
        HTTPServer(host="127.0.0.1", port=0) as clore_http,
        HTTPServer(host="127.0.0.1", port=0) as github_http,
    ):
        clock = FakeClock()
        fake = fake_market(clore_http, clock, sshd.port)
        fake.online_after_s = BOOT_S
        github = FakeRunnersGitHub(github_http)
        github.build_package()
        folder = tmp / f"round{n}"
        folder.mkdir()
        host = Host(fake, github, clock, sshd, folder)
        try:
            return _measure(host)
        finally:
            for runner in host.home.glob("clore-*"):
                kill_runner(runner)


def _measure(host: Host) -> dict[str, float]:
    t0 = time.monotonic()
    started = host.invoke(host.start_args("--max-minutes", "30"))
    returned = time.monotonic()
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    registered = host.github.wait_for("registered", rental.runner_id)
    online = host.github.wait_for("connect", rental.runner_id)
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    t1 = time.monotonic()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    stop_returned = time.monotonic()
    assert stopped.exit_code == 0, stopped.output
    (order,) = host.fake.orders.values()
    return {
        "start_to_registered_s": registered - t0,
        "start_to_online_s": online - t0,
        "start_returned_s": returned - t0,
        "stop_to_cancelled_s": host.ended[order.id] - t1,
        "stop_returned_s": stop_returned - t1,
        "created": float(len(host.fake.orders)),
        "leaked": float(len(host.fake.live_orders())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="for CI: one round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sshd = start_sshd(tmp / "sshd")
        try:
            results = [one_round(n, tmp, sshd) for n in range(rounds)]
        finally:
            sshd.stop()
    keys = [k for k in results[0] if k.endswith("_s")]
    print(f"runner start/stop on the fakes, {rounds} round(s); the boot ({BOOT_S:g} s) is fake")
    for key in keys:
        values = [r[key] for r in results]
        shown = " ".join(f"{v:.3f}" for v in values)
        print(f"  {key:24} median {statistics.median(values):.3f} s   ({shown})")
    created = sum(r["created"] for r in results)
    leaked = sum(r["leaked"] for r in results)
    print(f"  orders created {created:.0f}, leaked {leaked:.0f}")
    if leaked:
        raise SystemExit("orders leaked")


if __name__ == "__main__":
    main()
