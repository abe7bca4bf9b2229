"""The sticky PR comment: one comment per PR and header, found by a hidden marker and updated.

The marker `<!-- clore-run:{header} -->` is the comment's first line. A comment counts as ours
when it starts with the marker and was written by the token's own user (or, when the token
cannot tell who it is, as `GITHUB_TOKEN` cannot, by a bot): a human who quotes or copies the
marker does not get their comment overwritten.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from runner import redact
from runner.report.github_api import GitHubApi, GitHubError, RateLimited
from runner.report.markdown import cut_markdown

COMMENT_LIMIT = 65_536  # characters; longer bodies get 422 "Body is too long"
_LIMIT_MARGIN = 536  # GitHub's count may differ from ours for astral characters and CRLF
_PR_EVENTS = {
    "pull_request",
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
}


@dataclass(frozen=True)
class Posted:
    """What happened: `created`, `updated` or `unchanged`, and the comment's URL."""

    action: str
    url: str


def marker(header: str) -> str:
    """The hidden first line. The header is percent-encoded where it could break the marker: `%`
    itself, line breaks and other control characters (the marker must stay one line), and a `-`
    before another `-` (`--` would end the HTML comment). So distinct headers never share a
    marker, and a plain header (`gpu-tests`) reads as it is."""
    safe = _MARKER_UNSAFE.sub(_percent, header.strip()) or "default"
    return f"<!-- clore-run:{safe} -->"


def _percent(match: re.Match[str]) -> str:
    char = match.group()
    return "%2D" if char == "-" else quote(char, safe="")  # quote() never encodes `-`


_MARKER_UNSAFE = re.compile(r"%|-(?=-)|[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def comment_body(markdown: str, header: str, run_url: str | None) -> str:
    """Marker + Markdown, cut cleanly under GitHub's comment size limit."""
    where = f"the [job summary]({run_url})" if run_url else "the job summary"
    note = f"\n_Cut to fit GitHub's comment size limit; the full report is in {where}._\n"
    head = marker(header) + "\n"
    markdown = redact.text(markdown)  # the comment is public and no runner masks it
    room = COMMENT_LIMIT - _LIMIT_MARGIN - _utf16_len(head)
    return head + cut_markdown(markdown, room, _utf16_len, note)


def _utf16_len(text: str) -> int:
    """Length as JavaScript and GitHub count it: characters outside the BMP count twice."""
    return len(text.encode("utf-16-le")) // 2


def load_event(env: Mapping[str, str]) -> dict[str, Any]:
    """The webhook payload of the triggering event, or {} when there is none."""
    path = env.get("GITHUB_EVENT_PATH", "")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pr_number(
    api: GitHubApi, repo: str, event_name: str, event: Mapping[str, Any], sha: str
) -> int | None:
    """The pull request this run belongs to, or None."""
    if event_name in _PR_EVENTS:
        pr = event.get("pull_request") or {}
        return _int(pr.get("number", event.get("number")))
    if event_name == "issue_comment":
        issue = event.get("issue") or {}
        return _int(issue.get("number")) if issue.get("pull_request") else None
    if event_name == "workflow_run":
        return _workflow_run_pr(api, repo, event.get("workflow_run") or {})
    return _commit_pr(api, repo, str(event.get("after") or sha))


def _workflow_run_pr(api: GitHubApi, repo: str, run: Mapping[str, Any]) -> int | None:
    prs = run.get("pull_requests") or []
    if prs:
        return _int(prs[0].get("number"))
    # Empty for PRs from forks: look the PR up by its head branch instead.
    owner = ((run.get("head_repository") or {}).get("owner") or {}).get("login")
    branch = run.get("head_branch")
    if not (owner and branch):
        return None
    pulls = api.call(
        "GET", f"/repos/{repo}/pulls", params={"head": f"{owner}:{branch}", "state": "open"}
    )
    return _int(pulls[0].get("number")) if isinstance(pulls, list) and pulls else None


def _commit_pr(api: GitHubApi, repo: str, sha: str) -> int | None:
    if not sha or set(sha) == {"0"}:
        return None
    pulls = api.call("GET", f"/repos/{repo}/commits/{sha}/pulls")
    if not isinstance(pulls, list):
        return None
    ours = [p for p in pulls if ((p.get("base") or {}).get("repo") or {}).get("full_name") == repo]
    open_ = [p for p in ours if p.get("state") == "open"]
    chosen = (open_ or ours)[:1]
    return _int(chosen[0].get("number")) if chosen else None


def upsert_comment(api: GitHubApi, repo: str, pr: int, header: str, body: str) -> Posted:
    """Update our comment with this header, or create it. Sections another writer keeps in it
    (`upsert_section`: the GPU runners') stay, after the new body."""
    existing = find_comment(api, repo, pr, marker(header))
    if existing is not None:
        body = keep_sections(str(existing.get("body") or ""), body)
    if existing is None:
        created = api.call("POST", f"/repos/{repo}/issues/{pr}/comments", json={"body": body})
        return Posted("created", str(created.get("html_url", "")))
    if existing.get("body") == body:  # saves a write (and a notification)
        return Posted("unchanged", str(existing.get("html_url", "")))
    comment_id = existing["id"]
    updated = api.call("PATCH", f"/repos/{repo}/issues/comments/{comment_id}", json={"body": body})
    return Posted("updated", str(updated.get("html_url", "")))


def _section_marks(name: str) -> tuple[str, str]:
    safe = _MARKER_UNSAFE.sub(_percent, name.strip()) or "default"
    return f"<!-- clore-run-section:{safe} -->", f"<!-- /clore-run-section:{safe} -->"


_SECTION = re.compile(
    r"<!-- clore-run-section:(?P<name>[^\n>]*) -->\n.*?<!-- /clore-run-section:(?P=name) -->\n?",
    re.DOTALL,
)


def sections(body: str) -> dict[str, str]:
    """The named sections in a comment body, each with its marks, by name."""
    return {m.group("name"): m.group(0) for m in _SECTION.finditer(body)}


def with_section(body: str, name: str, markdown: str) -> str:
    """`body` with the section `name` replaced by `markdown` (appended when it was not there).
    The section's text is redacted like the rest of the comment."""
    opening, closing = _section_marks(name)
    block = f"{opening}\n{redact.text(markdown).rstrip()}\n{closing}\n"
    safe = opening.removeprefix("<!-- clore-run-section:").removesuffix(" -->")
    old = sections(body).get(safe)
    if old is not None:
        return body.replace(old, block, 1)
    return body.rstrip("\n") + "\n\n" + block


def keep_sections(old_body: str, new_body: str) -> str:
    """`new_body` plus the sections of `old_body` it does not have."""
    have = sections(new_body)
    kept = [text for name, text in sections(old_body).items() if name not in have]
    if not kept:
        return new_body
    return new_body.rstrip("\n") + "\n\n" + "\n".join(t.rstrip("\n") + "\n" for t in kept)


def upsert_section(
    api: GitHubApi, repo: str, pr: int, header: str, name: str, markdown: str, tries: int = 3
) -> Posted:
    """Put one section into our comment with this header (made when there is none), leaving
    the rest as it is. Two writers can read the same body and each write back its own: the
    comment is read back, and the section written again while it is missing."""
    posted = Posted("unchanged", "")
    for _ in range(max(1, tries)):
        existing = find_comment(api, repo, pr, marker(header))
        if existing is None:
            body = with_section(marker(header) + "\n", name, markdown)
            created = api.call("POST", f"/repos/{repo}/issues/{pr}/comments", json={"body": body})
            posted = Posted("created", str(created.get("html_url", "")))
        else:
            old = str(existing.get("body") or "")
            body = with_section(old, name, markdown)
            if body == old:
                return Posted("unchanged", str(existing.get("html_url", "")))
            comment_id = existing["id"]
            path = f"/repos/{repo}/issues/comments/{comment_id}"
            updated = api.call("PATCH", path, json={"body": body})
            posted = Posted("updated", str(updated.get("html_url", "")))
        again = find_comment(api, repo, pr, marker(header))
        if again is not None and with_section(str(again.get("body") or ""), name, markdown) == str(
            again.get("body") or ""
        ):
            return posted
    return posted


def find_comment(api: GitHubApi, repo: str, pr: int, mark: str) -> dict[str, Any] | None:
    """Our first comment on the PR that carries `mark`, looking through every page."""
    me = _viewer(api)
    pages = api.paginate(f"/repos/{repo}/issues/{pr}/comments", {"per_page": 100})
    for comment in pages:
        body = str(comment.get("body") or "")
        if body.split("\n", 1)[0].strip() == mark and _is_ours(comment.get("user") or {}, me):
            return dict(comment)
    return None


def _viewer(api: GitHubApi) -> str | None:
    """The token's login; None for an Actions/App token, which may not call GET /user (403).

    Any other failure (a rate limit, a server error) is raised: guessing "a bot" then would miss
    a personal token's own comment and post a second one."""
    try:
        user = api.call("GET", "/user")
    except RateLimited:
        raise
    except GitHubError as exc:
        if exc.status in (401, 403, 404):
            return None
        raise
    return str(user.get("login")) if isinstance(user, dict) else None


def _is_ours(user: Mapping[str, Any], me: str | None) -> bool:
    if me is not None:
        return user.get("login") == me
    return user.get("type") == "Bot"


def is_fork_pr(event: Mapping[str, Any], repo: str) -> bool:
    head = ((event.get("pull_request") or {}).get("head") or {}).get("repo") or {}
    return bool(head.get("full_name")) and head.get("full_name") != repo


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def api_url(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get("GITHUB_API_URL") or "https://api.github.com"
