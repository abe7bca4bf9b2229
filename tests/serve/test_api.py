"""The queue's API end to end over real HTTP on loopback, jobs on the local backend."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fakes.fake_clock import FakeClock
from tests.serve.harness import FINAL, Api, thread_server


def gated(name: str, gate: Path, extra: str = "") -> str:
    """A job that runs until `gate` exists (so a test decides when it ends)."""
    return f"""
  {name}:
    run: |
      while [ ! -e {gate} ]; do sleep 0.02; done
      echo {name} done
{extra}"""


@pytest.mark.slow
def test_a_pipeline_runs_with_its_log_and_listing(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        ids = srv.api.submit(
            "name: demo\njobs:\n  build:\n    run: echo built\n"
            "  test:\n    needs: build\n    run: echo tested\n"
        )
        assert ids == ["s1.build", "s1.test"]
        job = srv.api.wait_status("s1.test", FINAL)
        assert job["status"] == "passed" and job["needs"] == ["s1.build"]
        assert [a["failure"] for a in job["attempt_list"]] == [None]
        assert job["server"] == "localhost"
        build = srv.api.job("s1.build")
        assert build["finished_at"] <= job["started_at"]  # needs are kept
        log = srv.api.get("/jobs/s1.build/log")
        assert log.status_code == 200 and b"built" in log.content
        page = srv.api.get("/jobs", params={"status": "passed"}).json()
        assert [j["id"] for j in page["jobs"]] == ids and page["next_after"] is None


@pytest.mark.slow
def test_needs_across_submissions(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path) as srv:
        (first,) = srv.api.submit("jobs:" + gated("train", gate))
        (second,) = srv.api.submit("jobs:\n  eval:\n    run: echo eval\n", after=first)
        body = {"id": "report", "run": "echo r", "needs": [second]}
        reply = srv.api.request("POST", "/jobs", json=body)
        assert reply.status_code == 201 and reply.json()["ids"] == ["s3.report"]
        srv.api.wait_status(first, {"running"})
        assert srv.api.job(second)["waiting_for"] == f"needs '{first}' (running)"
        assert srv.api.status("s3.report") == "queued"
        gate.touch()
        report = srv.api.wait_status("s3.report", FINAL)
        assert report["status"] == "passed"
        assert srv.api.job(first)["finished_at"] <= srv.api.job(second)["started_at"]
        assert srv.api.job(second)["finished_at"] <= report["started_at"]


def test_a_failed_need_from_an_earlier_submission_skips_the_job(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        (bad,) = srv.api.submit("jobs:\n  bad:\n    run: exit 3\n")
        srv.api.wait_status(bad, FINAL)
        (late,) = srv.api.submit("jobs:\n  late:\n    run: echo never\n", after=bad)
        job = srv.api.wait_status(late, FINAL)
        assert (job["status"], job["reason"]) == ("skipped", f"needs '{bad}', which failed")


def test_not_before_with_an_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)  # 2027-01-15T08:00:00Z
    with thread_server(tmp_path, clock=clock) as srv:
        (night,) = srv.api.submit(
            "jobs:\n  night:\n    not-before: 2027-01-15T09:00:00Z\n    run: echo late\n"
        )
        assert srv.api.job(night)["waiting_for"] == "not before 2027-01-15T09:00:00Z"
        clock.unix += 3599
        srv.service.wake()
        assert srv.api.status(night) == "queued"
        clock.unix += 1
        srv.service.wake()
        job = srv.api.wait_status(night, FINAL)
        # ISO 8601 in UTC, as summary.json writes times (not unix seconds)
        assert job["status"] == "passed" and job["started_at"] == "2027-01-15T09:00:00.000+00:00"


def test_a_not_before_past_year_9999_in_utc_is_shown_not_a_500(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        (late,) = srv.api.submit(
            "jobs:\n  late:\n    not-before: 9999-12-31T23:59:59-23:59\n    run: echo late\n"
        )
        job = srv.api.job(late)  # asserts a 200
        assert job["status"] == "queued"
        assert job["waiting_for"] == "not before 253402387139 s after 1970-01-01T00:00:00Z"


@pytest.mark.slow
def test_cancel_in_each_state(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path, capacity=1) as srv:
        running, queued, waiting = srv.api.submit(
            "jobs:"
            + gated("running", gate, "    priority: urgent")
            + "\n  queued:\n    run: echo q\n"
            + "\n  waiting:\n    needs: running\n    run: echo w\n"
        )
        srv.api.wait_status(running, {"running"})
        assert srv.api.request("DELETE", f"/jobs/{queued}").json() == {
            "id": queued,
            "status": "cancelled",
        }
        assert srv.api.request("DELETE", f"/jobs/{waiting}").status_code == 200
        reply = srv.api.request("DELETE", f"/jobs/{running}")
        assert reply.status_code == 202 and reply.json()["status"] == "cancelling"
        job = srv.api.wait_status(running, FINAL)
        assert job["status"] == "cancelled" and job["reason"] == "cancelled by request"
        assert job["attempt_list"][-1]["failure"] == "cancelled"
        assert (srv.api.status(queued), srv.api.status(waiting)) == ("cancelled", "cancelled")
        assert srv.service.servers_held == 0  # the place was given back
        again = srv.api.request("DELETE", f"/jobs/{running}")
        assert again.status_code == 409 and "already cancelled" in again.json()["detail"]
        assert srv.api.request("DELETE", "/jobs/s9.nope").status_code == 404


@pytest.mark.slow
def test_auth_is_required_except_for_health(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        anonymous = Api(srv.api.url, token=None)
        wrong = Api(srv.api.url, token="not-the-token-at-all")
        for api in (anonymous, wrong):
            for method, path in (("GET", "/jobs"), ("GET", "/stats"), ("POST", "/jobs")):
                reply = api.request(method, path, json={"run": "echo hi"})
                assert reply.status_code == 401, (method, path)
                assert reply.headers["WWW-Authenticate"].startswith("Bearer")
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert srv.api.get("/jobs").json()["jobs"] == []  # nothing was queued


def test_bad_requests_get_4xx_naming_the_field(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        api = srv.api
        text = b"jobs:\n  a:\n    run: x\n    needs: [b]\n"
        bad_yaml = api.request("POST", "/pipelines", data=text)
        problem = bad_yaml.json()["detail"][0]
        assert bad_yaml.status_code == 422
        assert (problem["line"], problem["loc"], problem["msg"]) == (
            4,
            ["body", "jobs", "a", "needs", 0],
            "unknown job 'b'",
        )
        unknown_after = api.request(
            "POST", "/pipelines", data=b"jobs: {a: {run: x}}", params={"after": "s9.x"}
        )
        # A valid request that needs what the queue does not hold (yet): a conflict with its
        # state, not a malformed body.
        assert unknown_after.status_code == 409
        assert unknown_after.json()["detail"][0]["loc"] == ["query", "after", 0]
        unknown_need = api.request("POST", "/jobs", json={"run": "x", "needs": ["s9.x"]})
        assert unknown_need.status_code == 409
        assert unknown_need.json()["detail"][0]["loc"] == ["body", "needs", 0]
        no_run = api.request("POST", "/jobs", json={"id": "x"})
        assert no_run.status_code == 422 and no_run.json()["detail"][0]["loc"] == ["body", "run"]
        wrong_type = api.request("POST", "/jobs", json={"run": "x", "timeout-minutes": "soon"})
        assert wrong_type.status_code == 422
        assert wrong_type.json()["detail"][0]["loc"] == ["body", "timeout-minutes"]
        bad_if = api.request("POST", "/jobs", json={"run": "x", "if": "sometimes()"})
        assert bad_if.status_code == 422 and bad_if.json()["detail"][0]["loc"] == ["body", "if"]
        typo = api.request("POST", "/jobs", json={"run": "x", "retires": 2})
        assert typo.status_code == 422 and typo.json()["detail"][0]["loc"] == ["body", "retires"]
        not_json = api.request(
            "POST", "/jobs", data=b"{nope", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code == 422
        not_utf8 = api.request("POST", "/pipelines", data=b"jobs: \xff")
        assert not_utf8.status_code == 422
        # FastAPI answers 400 for JSON that is not UTF-8: the same 422 as any bad JSON here
        not_utf8_json = api.request(
            "POST", "/jobs", data=b'{"run": "\xff"}', headers={"Content-Type": "application/json"}
        )
        assert not_utf8_json.status_code == 422
        assert not_utf8_json.json()["detail"][0]["type"] == "json_invalid"
        assert api.get("/jobs", params={"status": "bogus"}).status_code == 422
        assert api.get("/jobs", params={"limit": 0}).status_code == 422
        big = api.request("POST", "/pipelines", data=b"#" * (1 << 20 + 1))
        assert big.status_code == 413 and "limit" in big.json()["detail"]
        chunked = api.request("POST", "/pipelines", data=iter([b"#" * 600_000] * 2))
        assert chunked.status_code == 413
        assert api.get("/jobs").json()["jobs"] == []  # none of that queued anything
        metrics = api.get("/metrics").text
        assert 'clore_run_api_errors_total{code="413"} 2' in metrics
        assert 'clore_run_api_errors_total{code="422"}' in metrics


def test_submitted_text_cannot_read_the_servers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVER_SECRET", "hunter2")
    with thread_server(tmp_path) as srv:
        reply = srv.api.request(
            "POST",
            "/pipelines",
            data=b"env: {S: '${{ env.SERVER_SECRET }}'}\njobs: {a: {run: echo $S}}\n",
        )
        assert reply.status_code == 422
        problem = reply.json()["detail"][0]
        assert problem["loc"] == ["body", "env", "S"]
        assert problem["msg"] == "environment variable 'SERVER_SECRET' is not set"


@pytest.mark.slow
def test_stats_and_metrics(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        srv.api.submit("jobs:\n  ok:\n    run: echo ok\n  bad:\n    run: exit 1\n")
        srv.api.wait_status("s1.ok", FINAL)
        srv.api.wait_status("s1.bad", FINAL)
        stats = srv.api.get("/stats").json()
        assert stats["counts"]["passed"] == 1 and stats["counts"]["failed"] == 1
        assert stats["running"] == 0 and stats["capacity"] == 2
        text = srv.api.get("/metrics").text
        assert 'clore_run_jobs{status="passed"} 1' in text
        assert "clore_run_queue_wait_seconds_count 2" in text
        assert "clore_run_attempt_seconds_count 2" in text
        assert "# TYPE clore_run_spend_usd_total counter" in text


@pytest.mark.slow
def test_a_thousand_queued_jobs_list_and_status_latency(tmp_path: Path) -> None:
    clock = FakeClock()
    with thread_server(tmp_path, clock=clock) as srv:
        jobs = "".join(
            f"  j{i}:\n    not-before: 2030-01-01T00:00:00Z\n    run: echo {i}\n"
            for i in range(1000)
        )
        began = time.perf_counter()
        ids = srv.api.submit("jobs:\n" + jobs)
        submit_s = time.perf_counter() - began
        assert len(ids) == 1000
        pages, after, took = [], 0, []
        while True:
            began = time.perf_counter()
            page = srv.api.get("/jobs", params={"after": after, "limit": 200}).json()
            took.append(time.perf_counter() - began)
            pages += page["jobs"]
            if page["next_after"] is None:
                break
            after = page["next_after"]
        assert [j["id"] for j in pages] == ids
        status_s = []
        for job_id in ids[::50]:
            began = time.perf_counter()
            assert srv.api.status(job_id) == "queued"
            status_s.append(time.perf_counter() - began)
        stats = srv.api.get("/stats").json()
        assert stats["counts"]["queued"] == 1000
        print(
            json.dumps(
                {
                    "submit_1000_s": round(submit_s, 3),
                    "list_page_200_ms": round(1000 * max(took), 1),
                    "status_ms_max": round(1000 * max(status_s), 1),
                }
            )
        )


@pytest.mark.slow
def test_a_path_names_all_its_methods_in_allow(tmp_path: Path) -> None:
    """Starlette named only the first route's method (POST for /jobs)."""
    with thread_server(tmp_path) as srv:
        for path, methods in (("/jobs", "GET, HEAD, POST"), ("/jobs/s1.x", "DELETE, GET, HEAD")):
            reply = srv.api.request("OPTIONS", path)
            assert reply.status_code == 405 and reply.headers["Allow"] == methods, path
        assert srv.api.request("PUT", "/stats").headers["Allow"] == "GET, HEAD"


@pytest.mark.slow
def test_the_document_says_what_each_route_answers(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        document = srv.api.get("/openapi.json").json()
    metrics = document["paths"]["/metrics"]["get"]["responses"]
    assert list(metrics["401"]["content"]) == ["application/json"]  # as every route's 401
    assert "text/plain" in metrics["200"]["content"]
    job = document["components"]["schemas"]["JobSubmission"]
    assert "run" in job["required"] and job["properties"]["run"]["type"] == "string"
    body = document["paths"]["/pipelines"]["post"]["requestBody"]["content"]
    assert body == {"application/yaml": {"schema": {"$ref": "#/components/schemas/Pipeline"}}}
    pipeline = document["components"]["schemas"]["Pipeline"]
    assert pipeline["properties"]["jobs"]["minProperties"] == 1
    operations = {op["operationId"] for path in document["paths"].values() for op in path.values()}
    for route in ("/jobs", "/pipelines"):  # a submission's links lead to its server ids
        links = document["paths"][route]["post"]["responses"]["201"]["links"]
        assert {link["operationId"] for link in links.values()} <= operations
