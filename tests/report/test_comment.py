"""The sticky PR comment against a fake GitHub API (loopback only, no real sleeps)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner
from werkzeug import Request, Response

from runner.cli.comment import register
from runner.report import write_reports
from runner.report.comment import marker
from runner.report.comment_post import Http, Outcome, post_comment
from tests.fakes.fake_clock import START_UNIX, FakeClock
from tests.report.fake_github import BOT, HUMAN, FakeGitHub, reply
from tests.report.records import mixed_record, write_outputs

REPO = "octo/gpu-lib"
HEAD_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def github(httpserver: HTTPServer) -> Iterator[FakeGitHub]:
    yield FakeGitHub(httpserver, REPO)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def summary_path(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_outputs(out)
    return write_reports(out, mixed_record()).summary_json


def _env(
    tmp_path: Path, github: FakeGitHub, event_name: str = "pull_request", event: Any = None
) -> dict[str, str]:
    event_path = tmp_path / "event.json"
    event_path.write_text(
        json.dumps(event if event is not None else {"pull_request": {"number": 7}})
    )
    return {
        "GITHUB_API_URL": github.api_url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "ghs_fake",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_SHA": HEAD_SHA,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"),
    }


def _post(
    summary: Path, env: dict[str, str], clock: FakeClock, header: str | None = None
) -> Outcome:
    return post_comment(summary, header=header, env=env, http=Http(clock=clock))


def test_creates_the_comment_when_there_is_none(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert (outcome.exit_code, outcome.level) == (0, "posted")
    assert outcome.message.startswith("created PR comment https://github.com/octo/gpu-lib/pull/7")
    [comment] = github.comments[7]
    assert comment["body"].startswith("<!-- clore-run:gpu-tests -->\n## ❌ gpu-tests: failed")
    assert not (tmp_path / "step-summary.md").exists()  # posted: no fallback needed


def test_updates_its_own_comment_and_leaves_others(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.add(7, "LGTM", HUMAN)
    ours = github.add(7, f"{marker('gpu-tests')}\nold results")
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.message.startswith("updated")
    assert [c["body"][:20] for c in github.comments[7]] == ["LGTM", f"{marker('gpu-tests')}"[:20]]
    assert ours["body"] != f"{marker('gpu-tests')}\nold results"
    assert _post(summary_path, _env(tmp_path, github), clock).message.startswith("unchanged")


def test_finds_the_marker_on_page_three(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    for i in range(230):
        github.add(7, f"chatter {i}", HUMAN)
    ours = github.add(7, f"{marker('gpu-tests')}\nold")
    github.add(7, "after ours", HUMAN)
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.message.startswith("updated")
    assert github.pages_served == [1, 2, 3]
    assert len(github.comments[7]) == 232 and "gpu-tests: failed" in ours["body"]


def test_two_headers_keep_two_comments(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    env = _env(tmp_path, github)
    assert _post(summary_path, env, clock, header="a100").message.startswith("created")
    assert _post(summary_path, env, clock, header="h100").message.startswith("created")
    first = github.comments[7][0]
    first["body"] = f"{marker('a100')}\nstale"
    assert _post(summary_path, env, clock, header="a100").message.startswith("updated")
    bodies = [c["body"].split("\n", 1)[0] for c in github.comments[7]]
    assert bodies == [marker("a100"), marker("h100")]


@pytest.mark.parametrize("header", ["gpu\nnightly", "a--b", "a\rb", "50%"])
def test_an_odd_header_still_finds_its_own_comment(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path, header: str
) -> None:
    env = _env(tmp_path, github)
    assert _post(summary_path, env, clock, header=header).message.startswith("created")
    assert "\n" not in marker(header) and "--" not in marker(header)[4:-3]
    github.comments[7][0]["body"] = f"{marker(header)}\nstale"
    assert _post(summary_path, env, clock, header=header).message.startswith("updated")
    assert len(github.comments[7]) == 1


@pytest.mark.parametrize(
    "headers", [("a--b", "a-b"), ("a>b", "a-b"), ("gpu tests", "gpu\ntests"), ("a%2Db", "a--b")]
)
def test_distinct_headers_never_share_a_marker(headers: tuple[str, str]) -> None:
    assert marker(headers[0]) != marker(headers[1])


def test_a_human_copying_the_marker_is_not_overwritten(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    quoted = github.add(7, f"{marker('gpu-tests')}\nmy notes", HUMAN)
    assert _post(summary_path, _env(tmp_path, github), clock).message.startswith("created")
    assert quoted["body"] == f"{marker('gpu-tests')}\nmy notes"


def test_known_viewer_login_is_matched_exactly(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.routes["/user"] = {"login": "ci-bot"}  # a personal token: GET /user answers
    github.add(7, f"{marker('gpu-tests')}\nother bot", BOT)
    mine = github.add(7, f"{marker('gpu-tests')}\nmine", {"login": "ci-bot", "type": "User"})
    assert _post(summary_path, _env(tmp_path, github), clock).message.startswith("updated")
    assert mine["body"] != f"{marker('gpu-tests')}\nmine"


@pytest.mark.parametrize(
    ("status", "headers", "level"),
    [(429, {"retry-after": "3600"}, "notice"), (502, {}, "error")],
    ids=["rate-limited", "server-error"],
)
def test_no_duplicate_when_the_viewer_cannot_be_asked(
    tmp_path: Path,
    httpserver: HTTPServer,
    clock: FakeClock,
    summary_path: Path,
    status: int,
    headers: dict[str, str],
    level: str,
) -> None:
    # A personal token's comment is recognised by its login: when GET /user fails for a reason
    # other than "a token that may not ask" (403), guessing "a bot" would miss it and post twice.
    httpserver.expect_request("/api/v3/user").respond_with_response(
        reply({"message": "busy"}, status, headers)
    )
    github = FakeGitHub(httpserver, REPO)
    github.add(7, f"{marker('gpu-tests')}\nmine", {"login": "ci-bot", "type": "User"})
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.level == level, outcome.message
    assert len(github.comments[7]) == 1


def test_a_create_that_timed_out_at_the_gateway_is_not_sent_again(
    tmp_path: Path, httpserver: HTTPServer, clock: FakeClock, summary_path: Path
) -> None:
    # GitHub's 502/504 on a POST often comes after the comment was made: posting again would
    # leave two sticky comments. (Reads are still retried.)
    github = FakeGitHub(httpserver, REPO)
    created: list[str] = []

    def gateway_timeout(request: Request) -> Response:
        created.append(request.get_json()["body"])
        github.add(7, created[-1])
        return reply({"message": "Server Error"}, 502)

    httpserver.clear()
    httpserver.expect_request(re.compile(".*"), method="POST").respond_with_handler(gateway_timeout)
    httpserver.expect_request(re.compile(".*"), method="GET").respond_with_handler(github._get)
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert len(created) == 1 and len(github.comments[7]) == 1
    assert (outcome.exit_code, outcome.level) == (3, "error")


def test_read_only_token_is_a_notice_and_the_step_summary(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.post_status = 403
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert (outcome.exit_code, outcome.level) == (0, "notice")
    assert "read-only" in outcome.message and "the token" in outcome.message
    assert "gpu-tests: failed" in (tmp_path / "step-summary.md").read_text()
    assert clock.slept == []  # a permission 403 is not a rate limit: no retrying


def test_fork_pull_request_says_so(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.post_status = 403
    event = {"pull_request": {"number": 7, "head": {"repo": {"full_name": "someone/gpu-lib"}}}}
    outcome = _post(summary_path, _env(tmp_path, github, event=event), clock)
    assert outcome.exit_code == 0 and "a pull request from a fork" in outcome.message


def test_huge_report_is_cut_below_the_limit_instead_of_a_422(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    summary = json.loads(summary_path.read_text())
    template = next(j for j in summary["jobs"] if j["id"] == "test-4090")
    summary["jobs"] = [{**template, "id": f"j{i}", "name": f"job {i}"} for i in range(1000)]
    summary_path.write_text(json.dumps(summary))
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.message.startswith("created"), outcome.message
    body = github.comments[7][0]["body"]
    assert 60_000 < len(body) <= 65_536
    assert "_Cut to fit GitHub's comment size limit" in body
    assert body.count("<details>") == body.count("</details>")
    fences = [line for line in body.splitlines() if line.startswith("```")]
    assert len(fences) % 2 == 0


@pytest.mark.parametrize(
    ("status", "headers", "expected_sleep"),
    [
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(START_UNIX) + 30)}, 31.0),
        (429, {"retry-after": "5"}, 5.0),
    ],
    ids=["primary-403", "secondary-429"],
)
def test_rate_limit_reply_is_waited_out_then_retried(
    tmp_path: Path,
    httpserver: HTTPServer,
    clock: FakeClock,
    summary_path: Path,
    status: int,
    headers: dict[str, str],
    expected_sleep: float,
) -> None:
    limited = {"message": "API rate limit exceeded"}
    httpserver.expect_ordered_request("/api/v3/user").respond_with_json({}, status=403)
    httpserver.expect_ordered_request(
        "/api/v3/repos/octo/gpu-lib/issues/7/comments"
    ).respond_with_response(reply(limited, status, headers))
    github = FakeGitHub(httpserver, REPO)
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.message.startswith("created"), outcome.message
    assert clock.slept == [expected_sleep]


def test_rate_limit_too_long_to_wait_is_a_notice(
    tmp_path: Path, httpserver: HTTPServer, clock: FakeClock, summary_path: Path
) -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(clock.unix) + 3600)}
    httpserver.expect_request("/api/v3/user").respond_with_response(
        reply({"message": "API rate limit exceeded"}, 403, headers)
    )
    httpserver.expect_request("/api/v3/repos/octo/gpu-lib/issues/7/comments").respond_with_response(
        reply({"message": "API rate limit exceeded"}, 403, headers)
    )
    outcome = _post(summary_path, _env(tmp_path, FakeGitHub(httpserver, REPO)), clock)
    assert (outcome.exit_code, outcome.level) == (0, "notice")
    assert "rate limit" in outcome.message
    assert clock.slept == []  # an hour is not worth blocking CI for


def test_pagination_never_follows_a_link_to_another_host(
    tmp_path: Path, httpserver: HTTPServer, clock: FakeClock, summary_path: Path
) -> None:
    link = '<http://127.0.0.2:9/steal?page=2>; rel="next"'
    httpserver.expect_request(
        "/api/v3/repos/octo/gpu-lib/issues/7/comments", method="GET"
    ).respond_with_response(reply([], headers={"Link": link}))
    github = FakeGitHub(httpserver, REPO)
    outcome = _post(summary_path, _env(tmp_path, github), clock)
    assert outcome.message.startswith("created")  # had it followed the link: connection error


def test_issue_comment_on_a_pull_request(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    event = {"issue": {"number": 12, "pull_request": {"url": "..."}}}
    _post(summary_path, _env(tmp_path, github, "issue_comment", event), clock)
    assert list(github.comments) == [12]


def test_issue_comment_on_a_plain_issue_posts_nothing(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    event = {"issue": {"number": 12}}
    outcome = _post(summary_path, _env(tmp_path, github, "issue_comment", event), clock)
    assert outcome == Outcome(0, "not a pull request: no comment posted", "skipped")
    assert github.comments == {}


def test_workflow_run_with_its_pull_request(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    event = {"workflow_run": {"pull_requests": [{"number": 31}]}}
    _post(summary_path, _env(tmp_path, github, "workflow_run", event), clock)
    assert list(github.comments) == [31]


def test_workflow_run_from_a_fork_looks_up_the_head_branch(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.routes[f"/repos/{REPO}/pulls"] = [{"number": 44}]
    event = {
        "workflow_run": {
            "pull_requests": [],
            "head_branch": "fp8",
            "head_repository": {"owner": {"login": "someone"}},
        }
    }
    _post(summary_path, _env(tmp_path, github, "workflow_run", event), clock)
    assert list(github.comments) == [44]
    assert ("GET", f"/repos/{REPO}/pulls", {"head": "someone:fp8", "state": "open"}) in github.seen


def test_push_finds_the_pull_request_of_the_commit(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    other = {"number": 5, "state": "open", "base": {"repo": {"full_name": "fork/gpu-lib"}}}
    closed = {"number": 6, "state": "closed", "base": {"repo": {"full_name": REPO}}}
    ours = {"number": 8, "state": "open", "base": {"repo": {"full_name": REPO}}}
    github.routes[f"/repos/{REPO}/commits/{HEAD_SHA}/pulls"] = [other, closed, ours]
    _post(summary_path, _env(tmp_path, github, "push", {"after": HEAD_SHA}), clock)
    assert list(github.comments) == [8]


def test_push_without_a_pull_request_posts_nothing(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    github.routes[f"/repos/{REPO}/commits/{HEAD_SHA}/pulls"] = []
    outcome = _post(summary_path, _env(tmp_path, github, "push", {}), clock)
    assert outcome.level == "skipped" and github.comments == {}
    assert not (tmp_path / "step-summary.md").exists()


def test_missing_token_is_a_usage_error(
    tmp_path: Path, github: FakeGitHub, clock: FakeClock, summary_path: Path
) -> None:
    env = _env(tmp_path, github)
    del env["GITHUB_TOKEN"]
    outcome = _post(summary_path, env, clock)
    assert (outcome.exit_code, outcome.level) == (2, "error")


def test_cli_command_with_baseline(
    tmp_path: Path, github: FakeGitHub, summary_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in _env(tmp_path, github).items():
        monkeypatch.setenv(name, value)
    baseline = tmp_path / "main.json"
    summary = json.loads(summary_path.read_text())
    baseline.write_text(json.dumps({**summary, "total_cost_usd": 0.1, "ci": {"ref_name": "main"}}))
    app = typer.Typer()
    register(app)

    @app.command("noop")  # a second command, so Typer keeps `comment` as a subcommand
    def noop() -> None: ...

    result = CliRunner().invoke(
        app,
        [
            "comment",
            str(summary_path),
            "--baseline",
            str(baseline),
            "--header",
            "nightly",
            "--token",
            "t0k",
        ],
    )
    assert result.exit_code == 0, result.output
    body = github.comments[7][0]["body"]
    assert body.startswith(marker("nightly")) and "GPU cost vs main" in body
