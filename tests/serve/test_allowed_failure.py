"""A failure `continue-on-error` allows reads `failed (allowed)` in `serve` as in `run`: the
API says so, `jobs`, `status` and the dashboard show it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.harness import FINAL, TOKEN, cli, thread_server
from tests.serve.test_dashboard import logged_in

AUTH = {"CLORE_RUN_TOKEN": TOKEN}
PIPELINE = (
    "jobs:\n"
    "  flaky: {run: 'exit 3', continue-on-error: true, retries: 0}\n"
    "  broken: {run: 'exit 4', retries: 0}\n"
)


@pytest.mark.slow
def test_an_allowed_failure_reads_failed_allowed_everywhere(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        srv.api.submit(PIPELINE)
        for job_id in ("s1.flaky", "s1.broken"):
            assert srv.api.wait_status(job_id, FINAL)["status"] == "failed"
        listed = {j["id"]: j for j in srv.api.get("/jobs").json()["jobs"]}
        assert listed["s1.flaky"]["allowed_failure"] is True
        assert listed["s1.broken"]["allowed_failure"] is False
        assert srv.api.job("s1.flaky")["allowed_failure"] is True

        rows = cli("jobs", "--server", url, env=AUTH).stdout.splitlines()[1:]
        shown = {r.split()[0]: r for r in rows}
        assert shown["s1.flaky"].split()[1:3] == ["failed", "(allowed)"]
        assert shown["s1.broken"].split()[1:3] == ["failed", "broken"]
        status = cli("status", "s1.flaky", "--server", url, env=AUTH).stdout
        assert status.startswith("s1.flaky: failed (allowed)")
        assert ": test failure" in status and "test_failure" not in status  # words, not enums

        browser = logged_in(url)
        for page in ("/ui/queue/rows", "/ui/jobs/s1.flaky/panel", "/ui/submissions/1"):
            html = browser.get(url + page).text
            assert "failed (allowed)" in html, page
        assert "failed (allowed)" not in browser.get(url + "/ui/jobs/s1.broken/panel").text


@pytest.mark.slow
def test_jobs_says_why_a_queued_job_waits(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path) as srv:
        url = srv.api.url
        srv.api.submit(
            f"jobs:\n  first:\n    run: while [ ! -e {gate} ]; do sleep 0.02; done\n"
            "  second: {needs: [first], run: 'true'}\n"
        )
        srv.api.wait_status("s1.first", {"running"})
        listed = {j["id"]: j for j in srv.api.get("/jobs").json()["jobs"]}
        assert listed["s1.second"]["waiting_for"] == "needs 's1.first' (running)"
        assert listed["s1.first"]["waiting_for"] is None
        rows = cli("jobs", "--server", url, env=AUTH).stdout.splitlines()[1:]
        (second,) = [r for r in rows if r.startswith("s1.second")]
        assert second.endswith("waiting for needs 's1.first' (running)")
        gate.touch()
        srv.api.wait_status("s1.second", FINAL)
