"""One ledger per use of the action: a later step of the same job (another `mode: run` and
its always-run release) must not see, and so cannot cancel, the servers an earlier
runner-start handed over to its runners."""

from __future__ import annotations

from pathlib import Path

from tests.gha import interpolate
from tests.test_action import CLEANUP_STEP, RUN_STEP, Job, step_named

NAMING_STEP = "Name this step's ledger"


def _ledger(job: Job, step: str) -> str:
    return interpolate(step_named(step)["env"]["CLORE_RUN_LEDGER"], job.context({}))


def test_each_use_of_the_action_has_a_ledger_of_its_own(tmp_path: Path) -> None:
    job = Job(tmp_path)
    assert job.run(NAMING_STEP, {}).returncode == 0  # the runner-start step
    start_run, start_release = _ledger(job, RUN_STEP), _ledger(job, CLEANUP_STEP)
    assert job.run(NAMING_STEP, {}).returncode == 0  # a later `mode: run` step of the job
    later_run, later_release = _ledger(job, RUN_STEP), _ledger(job, CLEANUP_STEP)
    assert start_run == start_release and later_run == later_release
    assert start_run != later_run
    assert Path(start_run).parent == Path(later_run).parent  # the host history beside both
