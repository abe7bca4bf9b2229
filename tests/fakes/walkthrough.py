"""The test suite's fake Clore as a server of its own, to try the README's walkthrough with no
account and no money:

    python -m tests.fakes.walkthrough [--port 8765] [--boot 10]

It prints the two variables to export in another shell (CLORE_API_URL, CLORE_API_KEY), then
serves until Ctrl-C. Its marketplace is the suite's sample (reference/clore-api.md's shapes);
an order "boots" in `--boot` seconds on the real clock and its server is a real sshd on
loopback started here (OpenSSH's `sshd` must be installed), which lets in the key the order
carries, as Clore does: the jobs run on this machine, as you.
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from tempfile import TemporaryDirectory

from pytest_httpserver import HTTPServer
from werkzeug.serving import WSGIRequestHandler

from runner.clock import SystemClock
from tests.fakes.clore_api import API_KEY, FakeClore, FakeOrder
from tests.sshd_fixture import start_sshd

TICK_S = 0.5  # how often what hosts do on their own (a spot order outbid) is applied


class _RealClock(SystemClock):
    """The fake on real time: the clore-run it answers keeps real time too."""

    def advance(self, seconds: float) -> None:
        raise AssertionError("real time does not jump")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.walkthrough")
    parser.add_argument("--port", type=int, default=8765, help="the API's port on 127.0.0.1")
    parser.add_argument("--boot", type=float, default=10.0, help="seconds an order takes to boot")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with TemporaryDirectory(prefix="fake-clore-") as tmp:
        sshd = start_sshd(Path(tmp) / "sshd")
        http = HTTPServer(host="127.0.0.1", port=args.port, threaded=True)
        fake = FakeClore(http, _RealClock())  # type: ignore[arg-type]
        WSGIRequestHandler.date_time_string = fake.date_header  # type: ignore[method-assign,assignment]
        fake.online_after_s = args.boot
        fake.appear_after_s = min(3.0, args.boot)
        fake.ssh_host, fake.ssh_port = "127.0.0.1", sshd.port

        def authorize(order: FakeOrder) -> None:
            if order.ssh_key:
                sshd.authorize(order.ssh_key)

        fake.after_create = authorize
        fake.install()
        http.start()
        stop = threading.Event()
        print(f"fake Clore on {fake.url}; its servers' sshd on 127.0.0.1:{sshd.port}.")
        print("In another shell:")
        print(f"  export CLORE_API_URL={fake.url} CLORE_API_KEY={API_KEY}")
        print("then follow the README's walkthrough from `clore-run doctor`. Ctrl-C to stop.")
        try:
            while not stop.wait(TICK_S):
                fake.tick()
        except KeyboardInterrupt:
            live = [o.id for o in fake.orders.values() if o.live]
            print(f"\nstopped; orders still live here: {live or 'none'}")
        finally:
            http.stop()
            sshd.kill_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
