"""What `runner start|stop` talk to and wait on, built in one place so tests swap all of it:
the Clore client, the GitHub runners API, the clock, the provisioning options, the key and
the hedging policy."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hedge import HedgePolicy

if TYPE_CHECKING:
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.rental import ProvisionOptions
    from runner.backends.ssh.keys import ClientKey
    from runner.gh_runner.github import RunnerApi, Scope
    from runner.report.comment_post import Http

TOKEN_ENV = "CLORE_RUNNER_TOKEN"  # the token that may administer runners (not GITHUB_TOKEN)


def _clore() -> CloreClient:
    # a runner command builds it: the CLI imports this module for every command
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _github(token: str, scope: Scope, env: Mapping[str, str]) -> RunnerApi:
    # a runner command builds it: the CLI imports this module for every command
    from runner.gh_runner.github import RunnerApi
    from runner.report.comment import api_url
    from runner.report.github_api import GitHubApi

    return RunnerApi(GitHubApi(api_url(env), token), scope)


def _options() -> ProvisionOptions:
    # a runner command builds it: the CLI imports this module for every command
    from runner.backends.clore.rental import ProvisionOptions

    return ProvisionOptions()


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
    clore: Callable[[], CloreClient] = _clore
    github: Callable[[str, Scope, Mapping[str, str]], RunnerApi] = _github
    clock: Clock = SYSTEM_CLOCK
    options: Callable[[], ProvisionOptions] = _options
    key: Callable[[], ClientKey] = _key
    http: Callable[[], Http] = _http
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    hedge: HedgePolicy = field(default_factory=HedgePolicy)  # hedged boots, as `run` has them
