"""What `runner start|stop` talk to and wait on, built in one place so tests swap all of it:
the backend's API client and provisioning options (None: the backend's own, from the registry),
the GitHub runners API, the clock, the key and the hedging policy."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hedge import HedgePolicy

if TYPE_CHECKING:
    from runner.backends.runner_host import RunnerHosting
    from runner.backends.ssh.keys import ClientKey
    from runner.gh_runner.github import RunnerApi, Scope
    from runner.report.comment_post import Http

TOKEN_ENV = "CLORE_RUNNER_TOKEN"  # the token that may administer runners (not GITHUB_TOKEN)


def _github(token: str, scope: Scope, env: Mapping[str, str]) -> RunnerApi:
    # a runner command builds it: the CLI imports this module for every command
    from runner.gh_runner.github import RunnerApi
    from runner.report.comment import api_url
    from runner.report.github_api import GitHubApi

    return RunnerApi(GitHubApi(api_url(env), token), scope)


def _key() -> ClientKey:
    # a runner command builds it: the CLI imports this module for every command
    from runner.backends.ssh.keys import ClientKey

    return ClientKey.generate()


def _http() -> Http:
    # a runner command builds it: the CLI imports this module for every command
    from runner.report.comment_post import Http

    return Http()


@dataclass
class Wiring:
    # The backend's API client (tests: a fake marketplace's); None: RunnerHosting.client.
    client: Callable[[], Any] | None = None
    github: Callable[[str, Scope, Mapping[str, str]], RunnerApi] = _github
    clock: Clock = SYSTEM_CLOCK
    # The backend's provisioning options (tests: short waits); None: RunnerHosting.options.
    options: Callable[[], Any] | None = None
    key: Callable[[], ClientKey] = _key
    http: Callable[[], Http] = _http
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    hedge: HedgePolicy = field(default_factory=HedgePolicy)  # hedged boots, as `run` has them

    def api_client(self, hosting: RunnerHosting) -> Any:
        """The backend's API client: the stand-in, else the backend's own (from the
        environment: a missing key fails here)."""
        return (self.client or hosting.client)()

    def provision_options(self, hosting: RunnerHosting) -> Any:
        return (self.options or hosting.options)()
