"""The trust domain a submission from GitHub Actions gets: the repository's, or a fork's PR
its own whatever the workflow asks."""

from __future__ import annotations

import json
from pathlib import Path

from runner.serve.ci_trust import actions_domain
from runner.spec.trust import is_name

REPO = "acme/models"


def _env(tmp_path: Path, event_name: str, event: dict[str, object]) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(path),
    }


def _pr(head_repo: str, number: int = 42) -> dict[str, object]:
    return {
        "number": number,
        "pull_request": {"number": number, "head": {"repo": {"full_name": head_repo}}},
    }


def test_outside_actions_the_domain_is_as_asked() -> None:
    assert actions_domain({}, None) == (None, "")
    assert actions_domain({"GITHUB_REPOSITORY": REPO}, "team-a") == ("team-a", "")


def test_a_repositorys_own_runs_share_its_domain_unless_the_workflow_names_one(
    tmp_path: Path,
) -> None:
    assert actions_domain(_env(tmp_path, "push", {}), None) == ("repo-acme.models", "")
    assert actions_domain(_env(tmp_path, "pull_request", _pr(REPO)), None)[0] == "repo-acme.models"
    assert actions_domain(_env(tmp_path, "push", {}), "team-a") == ("team-a", "")


def test_a_pull_request_from_a_fork_is_a_domain_of_its_own(tmp_path: Path) -> None:
    env = _env(tmp_path, "pull_request", _pr("mallory/models", 7))
    domain, note = actions_domain(env, None)
    assert (domain, note) == ("fork-pr-acme.models-7", "")
    assert domain is not None and is_name(domain)
    # The fork edits the workflow it runs: asking for the repository's domain changes nothing.
    domain, note = actions_domain(env, "repo-acme.models")
    assert domain == "fork-pr-acme.models-7" and "its own" in note
    other = actions_domain(_env(tmp_path, "pull_request_target", _pr("eve/models", 8)), None)
    assert other[0] == "fork-pr-acme.models-8"
