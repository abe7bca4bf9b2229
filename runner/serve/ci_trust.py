"""The trust domain of a submission made from GitHub Actions (the action's `mode: submit`).

A repository's workflows share the domain `repo-<owner>.<name>`, unless the workflow names
another (`trust:`). A pull request from a fork is a domain of its own, `fork-pr-<owner>.<name>-<n>`,
whatever the workflow says: the fork wrote the code that runs, so no server it ran on may serve
another PR or the repository's own jobs, and the workflow a fork PR runs is the fork's to edit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.report.comment import is_fork_pr
from runner.spec.trust import fork_domain, repo_domain

_PR_EVENTS = ("pull_request", "pull_request_target", "pull_request_review")


def actions_domain(env: Mapping[str, str], asked: str | None) -> tuple[str | None, str]:
    """(the domain to submit with, a note to show or ""). Outside Actions: `asked` as given."""
    repo = env.get("GITHUB_REPOSITORY", "")
    if env.get("GITHUB_ACTIONS") != "true" or not repo:
        return asked, ""
    event = _event(env.get("GITHUB_EVENT_PATH", ""))
    if env.get("GITHUB_EVENT_NAME") in _PR_EVENTS and is_fork_pr(event, repo):
        own = fork_domain(repo, _pr_number(event))
        note = f"a pull request from a fork: trust domain {own}, its own"
        return own, note if asked and asked != own else ""
    return asked or repo_domain(repo), ""


def _event(path: str) -> Mapping[str, Any]:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pr_number(event: Mapping[str, Any]) -> int:
    """The PR's number (0 when the event lacks it: still a domain no repository job shares)."""
    number = (event.get("pull_request") or {}).get("number", event.get("number"))
    return number if isinstance(number, int) and not isinstance(number, bool) else 0
