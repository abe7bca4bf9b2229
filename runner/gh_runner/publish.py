"""What `start` and `stop` leave in GitHub Actions: step outputs, the step summary, the record
file the action uploads for the reaper, and the runners' section of the sticky PR comment.

Outside Actions (no GITHUB_ACTIONS=true) only the record file is written. Every text goes
through `runner.redact` on its way out (write_outputs, append_step_summary, with_section).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from runner.backends.runner_record import ARTIFACT_PREFIX, RunnerRecord
from runner.gh_runner.report import runners_markdown, started_markdown, total_usd
from runner.gh_runner.stop import Stopped
from runner.report.comment import api_url, is_fork_pr, load_event, pr_number, upsert_section
from runner.report.comment_post import Http
from runner.report.github_actions import append_step_summary, is_active, write_outputs
from runner.report.github_api import GitHubApi, GitHubError, RateLimited, ReadOnly

SECTION = "gpu-runners"
_PR_EVENTS = ("pull_request", "pull_request_target")


def artifact_name(record: RunnerRecord) -> str:
    """Unique within the workflow run (artifact names must be): its first label."""
    return f"{ARTIFACT_PREFIX}{record.runners[0].label}"


def write_record(record: RunnerRecord, path: Path) -> None:
    """The record as a file (0600: it is no secret, but it is ours), for `stop --record` and
    for the artifact the reaper reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(record.to_json() + "\n")


def publish_start(record: RunnerRecord, record_path: Path, env: Mapping[str, str]) -> None:
    if not is_active(env):
        return
    if env.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(Path(env["GITHUB_STEP_SUMMARY"]), started_markdown(record))
    if not env.get("GITHUB_OUTPUT"):
        return
    write_outputs(
        Path(env["GITHUB_OUTPUT"]),
        {
            "label": record.runners[0].label,
            "labels": json.dumps(record.labels),
            "record": record.to_json(),
            "record-path": str(record_path),
            "record-artifact": artifact_name(record),
        },
    )


def publish_stop(
    stopped: Sequence[Stopped],
    env: Mapping[str, str],
    comment: str = "auto",
    header: str = "",
    http: Http | None = None,
) -> str:
    """Outputs, step summary and the comment section; returns what happened to the comment."""
    if not is_active(env):
        return ""
    markdown = runners_markdown(stopped, _run_url(env))
    if env.get("GITHUB_OUTPUT"):
        write_outputs(Path(env["GITHUB_OUTPUT"]), {"cost-usd": f"{total_usd(stopped):.4f}"})
    if env.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(Path(env["GITHUB_STEP_SUMMARY"]), markdown)
    return post_section(markdown, env, comment, header or "clore-run", http or Http())


def post_section(
    markdown: str, env: Mapping[str, str], comment: str, header: str, http: Http
) -> str:
    """The runners' section in the sticky comment of this run's PR. Not being able to comment
    is said, never an error: the step summary has it all."""
    event_name = env.get("GITHUB_EVENT_NAME", "")
    if comment == "false" or (comment == "auto" and event_name not in _PR_EVENTS):
        return ""
    token, repo = env.get("CLORE_GITHUB_TOKEN", ""), env.get("GITHUB_REPOSITORY", "")
    if not token or not repo:
        return "no PR comment: no github-token or GITHUB_REPOSITORY"
    api = GitHubApi(api_url(env), token, http.session, http.clock)
    event = load_event(env)
    try:
        pr = pr_number(api, repo, event_name, event, env.get("GITHUB_SHA", ""))
        if pr is None:
            return "not a pull request: no comment"
        posted = upsert_section(api, repo, pr, header, SECTION, markdown)
    except ReadOnly as exc:
        why = "a pull request from a fork" if is_fork_pr(event, repo) else "the token"
        return f"cannot comment ({why} has read-only access: {exc.message}); see the job summary"
    except RateLimited as exc:
        return f"GitHub rate limit: no comment posted ({exc.message})"
    except GitHubError as exc:
        return f"could not post the PR comment: {exc}"
    except requests.RequestException as exc:
        return f"could not reach the GitHub API ({type(exc).__name__}): no comment posted"
    return f"{posted.action} the PR comment's runner section {posted.url}".rstrip()


def _run_url(env: Mapping[str, str]) -> str | None:
    server, repo, run = (
        env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    )
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else None
