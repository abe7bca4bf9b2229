"""The parts on their own: the runners' section of the sticky PR comment (and a pipeline comment
keeping it), the GitHub client's errors in words, release's and the reaper's other answers,
the default wiring."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests
from pytest_httpserver import HTTPServer

from runner.backends.clore import bill
from runner.gh_runner import errors as e
from runner.gh_runner.github import JitConfig, RunnerApi, Scope
from runner.gh_runner.publish import post_section
from runner.gh_runner.reap import reap
from runner.gh_runner.record import RunnerRecord, RunnerRental
from runner.gh_runner.release import Released, release
from runner.gh_runner.report import runners_markdown
from runner.gh_runner.stop import Stopped
from runner.gh_runner.wiring import Wiring
from runner.report.comment import marker, upsert_comment
from runner.report.comment_post import Http
from runner.report.github_api import GitHubApi
from tests.fakes.clore_api import FakeClore, Faults
from tests.fakes.fake_clock import FakeClock
from tests.report.fake_github import FakeGitHub

REPO = "octo/gpu-lib"


def _rental(**change: object) -> RunnerRental:
    fields: dict[str, object] = {
        "label": "clore-777-1-1-abc123",
        "runner_id": 42,
        "scope": f"repos/{REPO}",
        "order_id": 1939941,
        "server_id": 88028,
        "created_unix": 1_783_700_000,
        "cap_unix": 1_783_703_600.0,
        "run_id": "runner-777-1",
        "currency": "USD-Blockchain",
        "spot": False,
        "usd_per_unit": 1.0,
        "fee_rate": 0.05,
        "creation_fee_native": 0.1,
        "usd_per_hour": 2 * 1.05 / 24,
        "gpus": "1x RTX <b>3090</b> | x",
    }
    fields.update(change)
    return RunnerRental.model_validate(fields)


def _stopped(kind: str = "cancelled") -> Stopped:
    cost = bill.billed_cost(0.05, 1.0, 0.05, 0.1, 300.0)
    return Stopped(
        Released(_rental(), kind, cost=cost, lived_s=300.0), "removed: it never took a job"
    )  # type: ignore[arg-type]


def test_the_report_escapes_the_marketplace_text_and_sums_the_bill() -> None:
    text = runners_markdown([_stopped()], "https://github.com/octo/gpu-lib/actions/runs/7")
    assert "<b>" not in text and "\\|" in text  # a server's name cannot break the table
    assert "**$0.0525**" in text and "creation $0.00" in text  # 10 minutes not reached
    assert "[run](https://github.com/octo/gpu-lib/actions/runs/7)" in text


def _pr_env(tmp_path: Path, github: FakeGitHub) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {"number": 7}}))
    return {
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_API_URL": github.api_url,
        "CLORE_GITHUB_TOKEN": "ghs_comment_token",
    }


def test_the_runner_section_joins_the_pipeline_comment_and_survives_its_update(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    github = FakeGitHub(httpserver, repo=REPO)
    github.add(7, marker("gpu") + "\npipeline: passed\n")
    env = _pr_env(tmp_path, github)
    said = post_section(runners_markdown([_stopped()]), env, "auto", "gpu", Http())
    assert said.startswith("updated the PR comment's runner section")
    (comment,) = github.comments[7]
    assert "pipeline: passed" in comment["body"] and "### GPU runners" in comment["body"]

    again = post_section(runners_markdown([_stopped()]), env, "auto", "gpu", Http())
    assert again.startswith("unchanged") or "updated" in again
    api = GitHubApi(github.api_url, "ghs_comment_token")
    upsert_comment(api, REPO, 7, "gpu", marker("gpu") + "\npipeline: failed\n")
    (comment,) = github.comments[7]
    assert "pipeline: failed" in comment["body"] and "### GPU runners" in comment["body"]
    assert comment["body"].count("### GPU runners") == 1


def test_the_runner_section_makes_the_comment_when_there_is_none(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    github = FakeGitHub(httpserver, repo=REPO)
    said = post_section(
        runners_markdown([_stopped()]), _pr_env(tmp_path, github), "auto", "gpu", Http()
    )
    assert said.startswith("created")
    (comment,) = github.comments[7]
    assert comment["body"].startswith(marker("gpu"))


@pytest.mark.parametrize(
    ("event", "comment", "words"),
    [("push", "auto", ""), ("pull_request", "false", "")],
)
def test_no_comment_where_none_is_asked(
    httpserver: HTTPServer, tmp_path: Path, event: str, comment: str, words: str
) -> None:
    github = FakeGitHub(httpserver, repo=REPO)
    env = {**_pr_env(tmp_path, github), "GITHUB_EVENT_NAME": event}
    assert post_section("x", env, comment, "gpu", Http()) == words
    assert github.seen == []


def test_a_read_only_token_is_said_not_failed(httpserver: HTTPServer, tmp_path: Path) -> None:
    github = FakeGitHub(httpserver, repo=REPO, post_status=403)
    said = post_section("x", _pr_env(tmp_path, github), "auto", "gpu", Http())
    assert "read-only access" in said
    no_token = {**_pr_env(tmp_path, github), "CLORE_GITHUB_TOKEN": ""}
    assert "no github-token" in post_section("x", no_token, "auto", "gpu", Http())


def _api(url: str, token: str = "t0ken-abcdef") -> RunnerApi:
    return RunnerApi(GitHubApi(url, token, tries=1), Scope.repo(REPO))


def test_the_client_says_when_github_cannot_be_reached() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(e.GitHubUnreachable) as caught:
        _api(f"http://127.0.0.1:{port}").generate_jitconfig("r", ["x"])
    said = caught.value.message  # in our words: no exception class, no urllib3
    assert said.endswith(f":{port}: connection refused") and "Error" not in said, said
    assert caught.value.hint == "check the network, or GITHUB_API_URL"


@pytest.mark.parametrize(
    ("status", "body", "kind", "words"),
    [
        (409, {"message": "Already exists"}, e.RunnerApiError, "GitHub API 409"),
        (201, {"runner": {"id": 1}}, e.RunnerApiError, "no runner or config"),
        (
            201,
            {"runner": {"id": "x"}, "encoded_jit_config": "abcdefgh"},
            e.RunnerApiError,
            "no runner id",
        ),
        (500, "<html>oops</html>", e.RunnerApiError, "GitHub API 500"),
    ],
)
def test_the_client_maps_the_other_answers(
    httpserver: HTTPServer, status: int, body: object, kind: type, words: str
) -> None:
    path = f"/repos/{REPO}/actions/runners/generate-jitconfig"
    if isinstance(body, str):
        httpserver.expect_request(path).respond_with_data(body, status)
    else:
        httpserver.expect_request(path).respond_with_json(body, status)
    with pytest.raises(kind) as caught:
        _api(httpserver.url_for("")).generate_jitconfig("r", ["x"])
    assert words in str(caught.value)


def test_a_jit_config_hides_itself() -> None:
    config = JitConfig("eyJzZWNyZXQiOiAieCJ9-long-enough")
    assert "eyJ" not in repr(config) and "eyJ" not in str(config)
    from runner import redact

    assert redact.text(f"see {config.reveal()}") == "see ***"


def test_deleting_a_runner_that_is_gone_says_so(httpserver: HTTPServer) -> None:
    httpserver.expect_request(
        f"/repos/{REPO}/actions/runners/9", method="DELETE"
    ).respond_with_json({"message": "Not Found"}, 404)
    assert _api(httpserver.url_for("")).delete_runner(9) is False


def _fake_order(fake: FakeClore, rental: RunnerRental) -> RunnerRental:
    order_id = fake.add_order(88028, age_s=120)
    order = fake.orders[order_id]
    return _rental(
        order_id=order_id, created_unix=int(order.created_unix), cap_unix=order.created_unix + 600
    )


def test_release_answers_for_each_state_of_the_order(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    client = fake_clore.client()
    gone = release(client, _rental(order_id=1), fake_clock)
    assert gone.kind == "not-listed" and gone.settled
    rental = _fake_order(fake_clore, _rental())
    fake_clore.end_order(rental.order_id)
    fake_clock.advance(1000.0)  # stop comes long after, past the 10-minute cap
    ended = release(client, rental, fake_clock)
    assert ended.kind == "ended" and ended.cost is not None and ended.settled
    assert abs(ended.lived_s - fake_clore.lived_s(rental.order_id)) < 1.0  # from its spend
    assert ended.cost.creation_fee_usd == 0.0  # it lived 2 minutes, not the cap's 10
    live = _fake_order(fake_clore, _rental())
    fake_clore.fail_next("my_orders", Faults.INVALID_TOKEN)
    broken = release(client, live, fake_clock)
    assert broken.kind == "error" and not broken.settled
    fake_clore.cancel_lag_s = 10_000.0  # cancelled, but listed as live for ever
    stuck = release(client, live, fake_clock, confirm_within_s=5.0)
    assert stuck.kind == "still-live" and not stuck.settled
    fake_clore.cancel_lag_s = 0.0
    assert fake_clore.live_orders() == []


def test_the_reaper_looks_at_an_order_once_and_dry_runs(
    fake_clore: FakeClore, fake_clock: FakeClock
) -> None:
    client = fake_clore.client()
    rental = _fake_order(fake_clore, _rental())
    record = RunnerRecord(runners=(rental,))
    # The clock only moves on: the client's rate limiter waits out a step back.
    fake_clock.unix = rental.cap_unix + 60
    just = reap([record], client, fake_clock)
    assert "just past its cap" in just[0].note and fake_clore.live_orders()
    fake_clock.unix = rental.cap_unix + 3600
    dry = reap([record, record], client, fake_clock, dry_run=True)
    assert len(dry) == 1 and "would cancel" in dry[0].note and fake_clore.live_orders()
    fake_clock.unix = rental.cap_unix + 3600
    done = reap([record], client, fake_clock)
    assert done[0].released is not None and done[0].released.kind == "cancelled"


def test_the_default_wiring_builds_the_real_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    wiring = Wiring()
    from runner.backends.clore.errors import MissingApiKeyError
    from runner.backends.registry import runner_hosting

    hosting = runner_hosting("clore")
    with pytest.raises(MissingApiKeyError):
        wiring.api_client(hosting)
    api = wiring.github("t0ken-abcdef", Scope.org("octo"), {"GITHUB_API_URL": "http://x"})
    assert api.scope.words == "organization octo" and api.api.base_url == "http://x"
    options = wiring.provision_options(hosting)
    assert options.online_timeout_s > 0 and wiring.key().public_line
    assert isinstance(wiring.http(), Http)


def test_a_record_goes_to_json_and_back() -> None:
    from runner.gh_runner.record import parse_record

    record = RunnerRecord(runners=(_rental(),))
    assert parse_record(record.to_json()) == record and record.labels == [_rental().label]
    assert "\n" not in record.to_json()


def test_a_failing_artifacts_listing_is_an_infrastructure_error(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.errors import InfrastructureError, UsageError
    from runner.gh_runner.reap_cmd import reap_from_github

    httpserver.expect_request(f"/repos/{REPO}/actions/artifacts").respond_with_json(
        {"message": "Server Error"}, 500
    )
    env = {
        "GITHUB_TOKEN": "ghs_tok3n",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_API_URL": httpserver.url_for(""),
    }
    with pytest.raises(InfrastructureError, match="could not read the artifacts"):
        reap_from_github(lambda: pytest.fail("no Clore call"), False, print, env)
    with pytest.raises(UsageError, match="GITHUB_TOKEN"):
        reap_from_github(lambda: pytest.fail("no Clore call"), False, print, {})
    assert requests  # the module's own import, for the session type
