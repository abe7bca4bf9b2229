"""A submission's trust domain through the API: asked for, checked as a name, kept on every job
of the submission (the queue row, the job the scheduling core is given, the replies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.core.model import DEFAULT_TRUST
from runner.spec.trust import MAX_LENGTH, fork_domain, is_name, repo_domain
from tests.serve.harness import FINAL, thread_server
from tests.serve.test_dashboard import logged_in

PIPELINE = "jobs:\n  build:\n    run: echo built\n  test:\n    needs: build\n    run: echo ok\n"
NOT_NAMES = [
    "../etc/passwd",
    "/abs",
    "a/b",
    "a..b",
    ".hidden",
    "-flag",
    "<b>x</b>",
    "x&y",
    'x"y',
    "x y",
    "x\x1b[31m",
    "x\n::error::y",
    "x\u202eevil",
    "é",
    "a" * (MAX_LENGTH + 1),
]


@pytest.mark.parametrize("value", NOT_NAMES)
def test_what_is_not_a_name(value: str) -> None:
    assert not is_name(value)


def test_names_of_repositories_and_forks() -> None:
    longest = fork_domain("o" * 39 + "/" + "r" * 100, 9_999_999)
    assert is_name(repo_domain("acme/models.v2")) and is_name(longest)
    assert repo_domain("acme/models") == "repo-acme.models"
    assert fork_domain("acme/models", 42) == "fork-pr-acme.models-42"
    assert is_name("a" * MAX_LENGTH) and is_name(DEFAULT_TRUST)


@pytest.mark.slow
def test_a_pipelines_jobs_are_of_the_domain_it_names(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        ids = srv.api.submit(PIPELINE, trust="repo-acme.models")
        plain = srv.api.submit(PIPELINE)
        for job_id in (*ids, *plain):
            srv.api.wait_status(job_id, FINAL)
        assert [srv.api.job(i)["trust"] for i in ids] == ["repo-acme.models"] * 2
        assert [srv.api.job(i)["trust"] for i in plain] == [DEFAULT_TRUST] * 2
        listed = srv.api.get("/jobs").json()["jobs"]
        assert {j["id"]: j["trust"] for j in listed}[ids[1]] == "repo-acme.models"
        page = logged_in(srv.api.url).get(f"{srv.api.url}/ui/jobs/{ids[0]}").text
        assert '<dd id="job-trust">repo-acme.models</dd>' in page  # the job page says it


@pytest.mark.slow
def test_the_core_is_given_jobs_of_their_domain(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path, capacity=1) as srv:
        srv.api.submit(f"jobs:\n  hold:\n    run: while [ ! -e {gate} ]; do sleep 0.02; done\n")
        (queued,) = srv.api.submit("jobs:\n  later:\n    run: echo x\n", trust="team-ml")
        reply = srv.api.request("POST", "/jobs", json={"run": "echo y", "trust": "team-cv"})
        assert reply.status_code == 201, reply.text
        (single,) = reply.json()["ids"]
        # What the service built for its core: a restart reads the same from the rows.
        trusts = {u.job.id: u.job.trust for u in srv.service.store.unsettled()}
        assert (trusts[queued], trusts[single]) == ("team-ml", "team-cv")
        core = srv.service.driver.core  # the scheduler's own copy, read on its loop
        built = srv.service.driver.call(lambda now: core._scheduler.job(queued)).result(10)
        assert built.trust == "team-ml"
        gate.touch()


@pytest.mark.parametrize("value", ["../etc", "<script>x</script>", "a" * (MAX_LENGTH + 1)])
def test_a_trust_that_is_not_a_name_is_refused_with_the_rule(tmp_path: Path, value: str) -> None:
    with thread_server(tmp_path) as srv:
        reply = srv.api.request(
            "POST", "/pipelines", params={"trust": value}, data=PIPELINE.encode()
        )
        assert reply.status_code == 422, reply.text
        (problem,) = reply.json()["detail"]
        assert problem["loc"] == ["query", "trust"]
        assert "letters, digits" in problem["msg"] and "default domain" in problem["hint"]
        one = srv.api.request("POST", "/jobs", json={"run": "true", "trust": value})
        assert one.status_code == 422
        assert one.json()["detail"][0]["loc"][:2] == ["body", "trust"]
        assert srv.api.get("/jobs").json()["jobs"] == []  # nothing was queued
