"""`python -m tests.gh_runner.entry ARGS...`: the real `clore-run ARGS...` (runner.launch.main:
the process guard, the CLI, exit codes) for the action's runner steps run against the fakes.

What differs from the installed `clore-run`, and only that:
- the market's pace, shortened as tests/chaos/entry.py shortens it (the client's spacing and
  back-off; here also the provisioner's polling, SSH back-off and confirmations, which `runner
  start` takes from its wiring): the fake's orders boot in about a second of real time;
- the runner package: the stand-in the fake GitHub serves (`PACKAGE_ENV`: its URL and SHA-256),
  run as root (the test's sshd runs as root), where the action installs the pinned release.
  The action has no input for either: `--runner-url` is the command line's.
"""

from __future__ import annotations

import functools
import os

PACKAGE_ENV = "CLORE_TEST_RUNNER_PACKAGE"  # "URL SHA256"


def main() -> None:
    from tests.chaos.entry import shorten_pace

    shorten_pace()
    from runner.backends.clore.provision import ProvisionOptions
    from runner.backends.ssh.connection import ConnectOptions
    from runner.cli import gh_runner as cli
    from runner.gh_runner.remote import RunnerPackage
    from runner.gh_runner.wiring import Wiring

    options = ProvisionOptions(
        online_timeout_s=20.0,
        first_poll_s=0.2,
        max_poll_s=0.5,
        ssh=ConnectOptions(tries=10, backoff_s=0.2, max_backoff_s=1.0, timeout_s=3.0),
        confirm_within_s=4.0,
        shutdown_confirm_within_s=2.0,
        first_confirm_pause_s=0.2,
    )
    cli.Wiring = functools.partial(Wiring, options=lambda: options)  # type: ignore[misc]
    url, sha256 = os.environ.get(PACKAGE_ENV, " ").split(" ", 1)
    if url:
        package = RunnerPackage(url=url, sha256=sha256, user="root")
        cli._package = lambda _url, _sha256, _user: package  # type: ignore[assignment]
    from runner.launch import main as launch

    launch()


if __name__ == "__main__":
    main()
