"""`cleanup --runners` wired to the environment: the repository's artifacts through
GITHUB_TOKEN, the orders through CLORE_API_KEY (read only when a record is past its cap)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import requests

from runner.backends.clore.api import CloreClient
from runner.errors import InfrastructureError, UsageError
from runner.gh_runner.reap import describe, reap, records_in_artifacts
from runner.report.comment import api_url
from runner.report.github_api import GitHubApi, GitHubError


def reap_from_github(
    make_client: Callable[[], CloreClient],
    dry_run: bool,
    say: Callable[[str], None],
    env: Mapping[str, str] | None = None,
    session: requests.Session | None = None,
) -> int:
    """Reap; returns how many rentals may still be billed."""
    env = os.environ if env is None else env
    token, repo = env.get("GITHUB_TOKEN", "").strip(), env.get("GITHUB_REPOSITORY", "").strip()
    if not token or not repo:
        raise UsageError(
            "--runners reads the runner records of a repository's artifacts",
            "set GITHUB_TOKEN (actions: read) and GITHUB_REPOSITORY, as a workflow does",
        )
    api = GitHubApi(api_url(env), token, session)
    try:
        records = list(records_in_artifacts(api, repo, say))
    except GitHubError as exc:
        raise InfrastructureError(f"could not read the artifacts of {repo}: {exc}") from None
    except requests.RequestException as exc:
        raise InfrastructureError(
            f"could not reach the GitHub API ({type(exc).__name__})"
        ) from None
    if not records:
        say(f"no runner records in the artifacts of {repo}: nothing to reap")
        return 0
    client = make_client()
    done = reap(records, client, client.limiter.clock, dry_run=dry_run)
    for each in done:
        say(describe(each))
    return sum(1 for d in done if d.released is not None and not d.released.settled)
