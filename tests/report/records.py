"""Fixed RunRecords for the report tests: every job status, retries, host facts, a job JUnit."""

from __future__ import annotations

from pathlib import Path

from runner.core.model import (
    Attempt,
    FailureKind,
    Job,
    JobResult,
    JobStatus,
    Location,
    Pipeline,
    RunRecord,
    RunStatus,
)

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z: a fixed clock for golden files

GPU_4090 = {
    "gpu": "RTX 4090",
    "gpu_count": "2",
    "driver": "550.54.15",
    "cuda": "12.4",
    "host_fingerprint": "SHA256:q1w2e3r4t5y6",
    "server_id": "40123",
    "usd_per_hour": "0.72",
    "order_currency": "CLORE-Blockchain",
    "cost_native": "31.5",
}
GPU_3090 = {"gpu": "RTX 3090", "server_id": "30077", "usd_per_hour": "0.30"}

PYTEST_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3" failures="1" errors="0" skipped="1">
<testcase classname="tests.test_model" name="test_forward" time="1.25"/>
<testcase classname="tests.test_model" name="test_backward" time="2.5">
<failure message="AssertionError: grad is NaN">tests/test_model.py:42: AssertionError</failure>
<system-out>loss=nan</system-out>
</testcase>
<testcase classname="tests.test_model" name="test_fp8" time="0">
<skipped message="needs Hopper"/>
</testcase>
</testsuite></testsuites>
"""


def _job(job_id: str, name: str, line: int, junit: str | None = None) -> Job:
    loc = Location("ci/gpu.yml", line, 3)
    return Job(id=job_id, name=name, run="true", location=loc, junit=junit, group=job_id)


def _att(
    n: int,
    start: float,
    secs: float,
    *,
    exit_code: int | None = None,
    failure: FailureKind | None = None,
    message: str = "",
    server: str = "",
    cost_usd: float = 0.0,
    facts: dict[str, str] | None = None,
    setup: float | None = None,
) -> Attempt:
    return Attempt(
        placed_at=None if setup is None else T0 + start + setup,
        number=n,
        started_at=T0 + start,
        finished_at=T0 + start + secs,
        exit_code=exit_code,
        failure=failure,
        message=message,
        server=server,
        cost_usd=cost_usd,
        facts=facts or {},
    )


def mixed_record() -> RunRecord:
    """Seven jobs: passed, flaky, failed twice (tests in its JUnit), timed out, infra, skipped,
    cancelled."""
    jobs = (
        _job("build", "build", 10),
        _job("unit", "unit | fast", 14),
        _job("test-4090", "test (RTX 4090)", 18, junit="results.xml"),
        _job("bench", "bench", 25),
        _job("train", "train", 30),
        _job("report", "report", 35),
        _job("docs", "docs", 40),
    )
    lost = FailureKind.SERVER_LOST
    results = (
        JobResult(
            "build",
            JobStatus.PASSED,
            attempts=(
                _att(
                    1, 0, 62, exit_code=0, server="gpu-a", cost_usd=0.0124, facts=GPU_4090, setup=20
                ),
            ),
        ),
        JobResult(
            "unit",
            JobStatus.PASSED,
            attempts=(
                _att(
                    1,
                    0,
                    30,
                    exit_code=1,
                    failure=FailureKind.TEST_FAILURE,
                    message="exit code 1",
                    server="gpu-b",
                    cost_usd=0.0025,
                    facts=GPU_3090,
                ),
                _att(2, 40, 20, exit_code=0, server="gpu-b", cost_usd=0.0017, facts=GPU_3090),
            ),
        ),
        JobResult(
            "test-4090",
            JobStatus.FAILED,
            "exit code 1",
            attempts=(
                _att(
                    1,
                    70,
                    300,
                    exit_code=1,
                    failure=FailureKind.TEST_FAILURE,
                    message="exit code 1",
                    server="gpu-a",
                    cost_usd=0.06,
                    facts=GPU_4090,
                ),
                _att(
                    2,
                    380,
                    290,
                    exit_code=1,
                    failure=FailureKind.TEST_FAILURE,
                    message="exit code 1",
                    server="gpu-a",
                    cost_usd=0.058,
                    facts=GPU_4090,
                ),
            ),
        ),
        JobResult(
            "bench",
            JobStatus.TIMED_OUT,
            "timed out after 10m",
            attempts=(
                _att(
                    1,
                    70,
                    600,
                    failure=FailureKind.TIMEOUT,
                    message="timed out after 10m",
                    server="gpu-c",
                    cost_usd=0.05,
                    facts=GPU_3090,
                ),
            ),
        ),
        JobResult(
            "train",
            JobStatus.ERROR,
            "server lost (outbid)",
            attempts=(
                _att(
                    1,
                    70,
                    100,
                    failure=lost,
                    message="server lost (outbid)",
                    server="gpu-d",
                    cost_usd=0.02,
                    facts=GPU_3090,
                ),
                _att(
                    2,
                    180,
                    50,
                    failure=lost,
                    message="server lost (outbid)",
                    server="gpu-e",
                    cost_usd=0.01,
                    facts=GPU_3090,
                ),
            ),
        ),
        JobResult("report", JobStatus.SKIPPED, "needs 'test-4090', which failed"),
        JobResult("docs", JobStatus.CANCELLED, "run cancelled"),
    )
    pipeline = Pipeline(name="gpu-tests", jobs=jobs, budget_usd=2.0, source="ci/gpu.yml")
    return RunRecord(pipeline, results, RunStatus.FAILED, T0, T0 + 700, "clore", "run-1")


def write_outputs(out: Path) -> None:
    """The files the engine leaves in OUT for `mixed_record`: logs and the job's JUnit."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "build.log").write_text("make: ok\n")
    (logs / "test-4090.log").write_text(
        "".join(f"collecting {i}\n" for i in range(40))
        + "\x1b[31mFAILED\x1b[0m tests/test_model.py::test_backward | grad\n"
        + "```\nnot a fence end\n"
    )
    (logs / "bench.log").write_text("step 1\nstep 2\n")
    (logs / "train.log").write_bytes(b"epoch 1\n\xff\xfe bad bytes\x01\n")
    junit = out / "artifacts" / "test-4090" / "results.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.write_text(PYTEST_JUNIT)


def baseline_summary() -> dict[str, object]:
    """A previous run on main, as its summary.json would say."""
    return {
        "schema": 1,
        "status": "passed",
        "total_cost_usd": 0.15,
        "duration_s": 800.0,
        "ci": {"ref_name": "main", "run_url": "https://github.com/o/r/actions/runs/41"},
        "jobs": [
            {"id": "build", "cost_usd": 0.0124, "duration_s": 62.0},
            {"id": "test-4090", "cost_usd": 0.09, "duration_s": 450.0},
            {"id": "gone", "cost_usd": 0.01, "duration_s": 5.0},
        ],
    }


CI_ENV = {
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "octo/gpu-lib",
    "GITHUB_RUN_ID": "9876543210",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_REF_NAME": "feature/fp8",
    "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
    "GITHUB_EVENT_NAME": "pull_request",
}
