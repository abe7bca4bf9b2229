"""`cleanup --runners` wired to the environment: the repository's artifacts through
GITHUB_TOKEN, the orders through CLORE_API_KEY (read only when there is a record to judge).

Everything a record carries is the uploader's text: every line said is made one inert console
line (a JSON key in a refused record could otherwise be a workflow command in the log)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import requests

from runner.backends.registry import runner_hosting
from runner.backends.runner_host import Reap
from runner.backends.runner_record import MAX_LIFE_S, Reaped
from runner.errors import InfrastructureError, UsageError
from runner.gh_runner.artifacts import DEFAULT_WORKFLOWS, trusted_records
from runner.gh_runner.wiring import RUNNER_BACKEND
from runner.report.comment import api_url
from runner.report.github_api import GitHubApi, GitHubError
from runner.untrusted import console_line


def reap_from_github(
    make_client: Callable[[], Any],
    dry_run: bool,
    say: Callable[[str], None],
    env: Mapping[str, str] | None = None,
    session: requests.Session | None = None,
    workflows: tuple[str, ...] = DEFAULT_WORKFLOWS,
    max_life_s: float = MAX_LIFE_S,
    cancel_unproven: bool = False,
    reap: Reap | None = None,
) -> int:
    """Reap (`reap`: the runners' backend's, from the registry; with the client `make_client`
    builds); returns how many rentals may still be billed (an order a record names and does
    not prove, live, among them: it may be ours). Raises InfrastructureError when records
    came from a workflow it was not told to trust (the reaper must fail loudly)."""
    env = os.environ if env is None else env
    token, repo = env.get("GITHUB_TOKEN", "").strip(), env.get("GITHUB_REPOSITORY", "").strip()
    if not token or not repo:
        raise UsageError(
            "--runners reads the runner records of a repository's artifacts",
            "set GITHUB_TOKEN (actions: read) and GITHUB_REPOSITORY, as a workflow does",
        )

    def tell(line: str) -> None:
        say(console_line(line))

    api = GitHubApi(api_url(env), token, session)
    try:
        sources = trusted_records(api, repo, workflows, tell)
    except GitHubError as exc:
        raise InfrastructureError(f"could not read the artifacts of {repo}: {exc}") from None
    except requests.RequestException as exc:
        raise InfrastructureError(
            f"could not reach the GitHub API ({type(exc).__name__})"
        ) from None
    left = 0
    if not sources.records:
        tell(f"no runner records in the artifacts of {repo}: nothing to reap")
    else:
        client = make_client()
        reap = reap or runner_hosting(RUNNER_BACKEND).reap
        done = reap(
            sources.records,
            client,
            dry_run=dry_run,
            max_life_s=max_life_s,
            cancel_unproven=cancel_unproven,
        )
        for each in done:
            tell(describe(each))
        left = sum(
            1 for d in done if d.unproven or (d.released is not None and not d.released.settled)
        )
    if sources.unnamed:
        raise InfrastructureError(
            f"{len(sources.unnamed)} runner record(s) came from workflows not named "
            f"({', '.join(workflows)}): their rentals were not looked at",
            "name every workflow that starts runners: cleanup --runners --workflows FILE,...",
        )
    return left


def describe(reaped: Reaped) -> str:
    """One line of what the reaper did with a record's rental."""
    r = reaped.rental
    head = f"{r.label}  server {r.server_id}  order {r.order_id}"
    if reaped.released is None:
        return f"{head}  {reaped.note}"
    rel = reaped.released
    cost = f"; cost as billed ${rel.cost.total_usd:.4f}" if rel.cost is not None else ""
    detail = f": {rel.detail}" if rel.detail else ""
    return f"{head}  {rel.kind}{detail}{cost}"
