"""How long jobs took in a baseline run's summary.json, as rent-ahead's expected durations."""

from __future__ import annotations

from typing import Any

from runner.core.predict import past_durations


def _job(job_id: str, status: str, *attempts: tuple[float, float | None]) -> dict[str, Any]:
    details = [{"duration_s": took, "setup_s": setup} for took, setup in attempts]
    return {"id": job_id, "status": status, "attempt_details": details}


def test_the_last_passing_attempt_less_its_setup_is_the_job_s_duration() -> None:
    summary = {
        "jobs": [
            _job("train", "passed", (50.0, 30.0), (400.0, 100.0)),  # retried: the last one
            _job("eval", "passed", (60.0, None)),  # a fixed host: no setup
            _job("flaky", "failed", (10.0, 1.0)),  # no pass: nothing to expect from it
        ]
    }
    assert past_durations(summary) == {"train": 300.0, "eval": 60.0}


def test_a_summary_of_another_shape_gives_no_durations_rather_than_an_error() -> None:
    assert past_durations({}) == {}
    assert past_durations({"jobs": "x"}) == {}
    odd = {"jobs": [1, {"id": 3, "status": "passed"}, _job("a", "passed", ("x", None))]}  # type: ignore[arg-type]
    assert past_durations(odd) == {}  # type: ignore[arg-type]
