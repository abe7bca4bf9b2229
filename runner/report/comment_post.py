"""Post or update the sticky PR comment for `clore-run comment`.

Not being able to comment (a fork PR's read-only token, a rate limit, no PR at all) is not a
failure of the run: it prints a notice, puts the report in the step summary, and exits 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import requests

from runner.clock import SYSTEM_CLOCK, Clock
from runner.report import load_summary, read_json, with_comparison
from runner.report.comment import (
    api_url,
    comment_body,
    is_fork_pr,
    load_event,
    pr_number,
    upsert_comment,
)
from runner.report.github_actions import append_step_summary, command, is_active
from runner.report.github_api import GitHubApi, GitHubError, RateLimited, ReadOnly
from runner.report.markdown import render_markdown
from runner.transport_words import cause_in_words

if TYPE_CHECKING:
    from runner.report.summary_model import Summary


TOKEN_REFUSED = (
    "pass a token that may write pull-request comments (--token, or GITHUB_TOKEN with "
    "`pull-requests: write` in the workflow's permissions)"
)


@dataclass(frozen=True)
class Outcome:
    """What `comment` did: its exit code, and a message for the log (`level` notice|error)."""

    exit_code: int
    message: str
    level: str = "notice"
    hint: str = ""  # what to do, for an error a person can fix


@dataclass(frozen=True)
class Http:
    """Injectable transport, so tests neither reach the network nor sleep."""

    session: requests.Session | None = None
    clock: Clock = SYSTEM_CLOCK


def post_comment(
    summary_path: Path,
    baseline_path: Path | None = None,
    header: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    http: Http | None = None,
) -> Outcome:
    """Create or update the sticky comment for this run's PR."""
    env = os.environ if env is None else env
    http = http or Http()
    try:
        summary = load_summary(summary_path)
    except OSError as exc:  # the system's reason in words, not `[Errno 2] ...`
        why = (exc.strerror or str(exc)).lower()
        hint = "pass the summary.json a run wrote (in its --out folder)"
        return Outcome(2, f"cannot read {summary_path}: {why}", "error", hint)
    except ValueError as exc:
        return Outcome(2, f"cannot read {summary_path}: {exc}", "error")
    summary, warning = _compared(summary, baseline_path)
    token = token or env.get("GITHUB_TOKEN", "")
    repo = env.get("GITHUB_REPOSITORY", "")
    if not token or not repo:
        return Outcome(
            2,
            "no GitHub token or repository to comment with",
            "error",
            "pass --token (or set GITHUB_TOKEN) and set GITHUB_REPOSITORY (owner/name)",
        )
    run_url = summary.ci.run_url if summary.ci else None
    name = header or summary.pipeline.name or "default"
    body = comment_body(render_markdown(summary), name, run_url)
    api = GitHubApi(api_url(env), token, http.session, http.clock)
    outcome = _post(api, repo, env, name, body)
    if outcome.level in ("notice", "error") and env.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(Path(env["GITHUB_STEP_SUMMARY"]), body)
    if warning:
        return Outcome(outcome.exit_code, f"{outcome.message} ({warning})", outcome.level)
    return outcome


def _compared(summary: Summary, baseline_path: Path | None) -> tuple[Summary, str]:
    if baseline_path is None:
        return summary, ""
    try:
        baseline = read_json(baseline_path)
    except (OSError, ValueError) as exc:
        return summary, f"baseline ignored: {exc}"
    return with_comparison(summary, baseline), ""


def _post(api: GitHubApi, repo: str, env: Mapping[str, str], header: str, body: str) -> Outcome:
    event = load_event(env)
    try:
        pr = pr_number(
            api, repo, env.get("GITHUB_EVENT_NAME", ""), event, env.get("GITHUB_SHA", "")
        )
        if pr is None:
            return Outcome(0, "not a pull request: no comment posted", "skipped")
        posted = upsert_comment(api, repo, pr, header, body)
    except ReadOnly as exc:
        why = "a pull request from a fork" if is_fork_pr(event, repo) else "the token"
        msg = f"cannot comment ({why} has read-only access: {exc.message}); see the job summary"
        return Outcome(0, msg)
    except RateLimited as exc:
        return Outcome(0, f"GitHub rate limit: no comment posted ({exc.message})")
    except GitHubError as exc:
        hint = TOKEN_REFUSED if exc.status == 401 else ""
        return Outcome(3, f"could not post the PR comment: {exc}", "error", hint)
    except requests.RequestException as exc:  # in our words, not requests' nested ones
        said = f"cannot reach the GitHub API at {api.base_url}: {cause_in_words(exc)}"
        return Outcome(3, said, "error", "check the network, or GITHUB_API_URL")
    return Outcome(0, f"{posted.action} PR comment {posted.url}".rstrip(), "posted")


def say(outcome: Outcome, env: Mapping[str, str] | None = None, out: TextIO | None = None) -> None:
    """Print the outcome as an Actions notice/error, or as a plain line outside Actions."""
    if is_active(env):
        kind = "error" if outcome.level == "error" else "notice"
        print(command(kind, outcome.message, title="clore-run comment"), file=out or sys.stdout)
    else:  # the one shape of every command's message
        hint = f"\nhint: {outcome.hint}" if outcome.hint else ""
        print(f"clore-run: {outcome.message}{hint}", file=out or sys.stderr)
