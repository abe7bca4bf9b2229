"""What the runner tests stand on: the fake Clore with its orders on the real sshd, the fake
GitHub and its stand-in runner package, the CLI wired to them, and a scan for the JIT config.

Every test ends with no live order on the fake (`Host.finish`) and no stand-in runner process
left: cancelling an order kills what its runner started "there" (on the shared sshd), as
stopping the container does on Clore.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from runner.backends.clore.rental import ProvisionOptions
from runner.backends.ssh.connection import ConnectOptions
from runner.backends.ssh.keys import ClientKey
from runner.cli.gh_runner import register
from runner.core.hedge import HedgePolicy
from runner.gh_runner.github import RunnerApi, Scope
from runner.gh_runner.record import RunnerRecord, parse_record
from runner.gh_runner.wiring import Wiring
from runner.report.comment_post import Http
from runner.report.github_api import GitHubApi
from tests.fakes.clore_api import API_KEY, FakeClore, FakeOrder
from tests.fakes.fake_clock import FakeClock
from tests.fakes.github_runners import ADMIN_TOKEN, REPO, FakeRunnersGitHub
from tests.sshd_fixture import SshServer

cli = CliRunner()
LEAKED: list[int] = []  # live orders found after a test, over the whole session
CREATED: list[int] = []  # every order the runner tests made


@dataclass
class Host:
    fake: FakeClore
    github: FakeRunnersGitHub
    clock: FakeClock
    sshd: SshServer
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)  # order id -> monotonic
    labels: dict[int, str] = field(default_factory=dict)  # order id -> runner label
    outputs: list[str] = field(default_factory=list)  # everything the CLI printed
    hedge: HedgePolicy = field(default_factory=HedgePolicy)  # start's, as `run` has it

    def __post_init__(self) -> None:
        self.key = ClientKey.generate()
        self.sshd.authorize(self.key.public_line)  # what Clore does with `ssh_key`
        self.env = {
            "CLORE_API_KEY": API_KEY,
            "CLORE_RUNNER_TOKEN": ADMIN_TOKEN,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_API_URL": self.github.url,
            "CLORE_RUN_CACHE": str(self.tmp / "cache"),  # the runner package, fetched once
        }
        self.fake.on_order_end = self._order_ended

    @property
    def home(self) -> Path:
        return self.sshd.folder / "home" / "clore-runner"

    def wiring(self, env: Mapping[str, str] | None = None) -> Wiring:
        clock = self.clock
        options = ProvisionOptions(
            online_timeout_s=240.0,
            pause=lambda seconds, _cancel: clock.sleep(seconds),
            ssh=ConnectOptions(tries=3, backoff_s=0.05, max_backoff_s=0.2),
        )

        def github(token: str, scope: Scope, env: Mapping[str, str]) -> RunnerApi:
            return RunnerApi(GitHubApi(self.github.url, token), scope)

        return Wiring(
            client=self.fake.client,
            github=github,
            clock=clock,
            options=lambda: options,
            key=lambda: self.key,
            http=Http,
            env=dict(env if env is not None else self.env),
            hedge=self.hedge,
        )

    def app(self, env: Mapping[str, str] | None = None) -> typer.Typer:
        app = typer.Typer()

        @app.callback()
        def main() -> None:
            """A stand-in for the real CLI, so `runner` stays a command group."""

        register(app, self.wiring(env))
        return app

    def job_runs(self, seconds: float = 120.0) -> None:
        """The user's job takes this long (fake time): stop comes later, from another machine
        with its own rate limiter."""
        self.clock.advance(seconds)

    def invoke(self, args: list[str], env: Mapping[str, str] | None = None) -> Result:
        self.clock.advance(2.0)  # each command is a process of its own, with its own limiter
        result = cli.invoke(self.app(env), args)
        self.outputs.append(result.output)
        return result

    def start_args(self, *extra: str, record: str = "record.json") -> list[str]:
        return [
            "runner",
            "start",
            "--currency",
            "USD-Blockchain",
            "--gpu",
            "3090",
            "--runner-url",
            self.github.package_url,
            "--runner-sha256",
            self.github.package_sha256,
            "--runner-user",
            "root",  # the test's sshd runs as root: `auto` would add a user to this machine
            "--record-file",
            str(self.tmp / record),
            "--ledger",
            str(self.tmp / "ledger.db"),
            *extra,
        ]

    def record(self, name: str = "record.json") -> RunnerRecord:
        record = parse_record((self.tmp / name).read_text())
        for rental in record.runners:
            self.labels[rental.order_id] = rental.label
        return record

    def _order_ended(self, order: FakeOrder) -> None:
        self.ended[order.id] = time.monotonic()
        label = self.labels.get(order.id)
        if label is not None:
            kill_runner(self.home / label)

    def finish(self) -> None:
        for folder in self.home.glob("*"):
            if folder.name.startswith("clore-"):
                kill_runner(folder)
        live = [o.id for o in self.fake.live_orders()]
        CREATED.extend(self.fake.orders)
        LEAKED.extend(live)
        if live:  # give them back so that the next test starts clean, then fail
            self.clock.advance(60.0)
            client = self.fake.client()
            for order_id in live:
                client.cancel_order(order_id)
        assert live == [], f"orders leaked: {live}"
        assert self.fake.violations == [], "the rate limits were exceeded"


def runner_pid(folder: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((folder / "runner.pid").read_text().strip())
    return None


def kill_runner(folder: Path) -> None:
    """Stop the stand-in's whole session (setsid made its pid the group id)."""
    pid = runner_pid(folder)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Block until process `pid` exits (a pidfd becomes readable), or the timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def scan_for(secret: str, roots: list[Path], texts: list[str]) -> list[str]:
    """Where `secret` appears: files under `roots`, the texts, and every process's argv."""
    found = [f"output {i}" for i, text in enumerate(texts) if secret in text]
    needle = secret.encode()
    for root in roots:
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and needle in path.read_bytes():
                    found.append(str(path))
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if needle in cmdline.read_bytes():
                found.append(str(cmdline))
    return found


def outputs_file(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file read back (name<<DELIM ... DELIM blocks)."""
    values: dict[str, str] = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        name, _, delimiter = lines[i].partition("<<")
        end = lines.index(delimiter, i + 1)
        values[name] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return values


def actions_env(host: Host, **more: str) -> dict[str, str]:
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        (host.tmp / name.lower()).touch()
    return {
        **host.env,
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(host.tmp / "github_output"),
        "GITHUB_STEP_SUMMARY": str(host.tmp / "github_step_summary"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "777",
        "GITHUB_RUN_ATTEMPT": "1",
        **more,
    }


def as_json(value: Any) -> str:
    return json.dumps(value)


@pytest.fixture
def host(
    fake_clore: FakeClore,
    fake_github: FakeRunnersGitHub,
    fake_clock: FakeClock,
    sshd_server: SshServer,
    tmp_path: Path,
) -> Iterator[Host]:
    fake_clore.ssh_host = "127.0.0.1"
    fake_clore.ssh_port = sshd_server.port
    made = Host(fake_clore, fake_github, fake_clock, sshd_server, tmp_path)
    yield made
    made.finish()
