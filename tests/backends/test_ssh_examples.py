"""The example pipelines run end to end with the ssh backend against the loopback sshd."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from runner.backends.ssh.backend import SshBackend
from runner.core.model import JobStatus
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import load_pipeline
from tests.sshd_fixture import SshServer

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_pipeline_passes_over_ssh(
    example: Path, sshd_server: SshServer, tmp_path: Path
) -> None:
    backend = SshBackend.from_flags([sshd_server.target], sshd_server.client_key)
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=REPO)
    record, code = execute(load_pipeline(example), backend, options, stream=io.StringIO())
    assert code == 0, [(r.job_id, r.status, r.reason) for r in record.results]
    assert all(r.status is JobStatus.PASSED for r in record.results)
    for result in record.results:
        assert result.attempts[-1].facts["host_key"].startswith("SHA256:")
    for job in record.pipeline.jobs:
        for name in (job.junit, *job.artifacts):
            if name and "*" not in name:
                assert (tmp_path / "out" / "artifacts" / job.id / name).is_file(), name
