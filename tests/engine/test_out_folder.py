"""`--out` may not be the filesystem root, nor a folder holding the workspace (`--out .` filled
the repository root with logs/ and junit.xml), unless that folder is empty or clore-run's."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from runner.backends.local import LocalBackend
from runner.engine.run_command import RunOptions, execute
from runner.errors import UsageError
from runner.spec.loader import parse_pipeline

PIPELINE = "jobs:\n  a: {run: 'true', workspace: false}\n"


def _run(out: Path, root: Path) -> int:
    pipeline = parse_pipeline(PIPELINE, "p.yml", {})
    _, code = execute(
        pipeline, LocalBackend(), RunOptions(out_dir=out, workspace_root=root), io.StringIO()
    )
    return code


def test_the_filesystem_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--out /: the root of the filesystem"):
        _run(Path("/"), tmp_path)


@pytest.mark.parametrize("where", [".", ".."])
def test_a_folder_holding_the_workspace_is_refused(tmp_path: Path, where: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "p.yml").write_text(PIPELINE)
    with pytest.raises(UsageError, match="holds the workspace"):
        _run(repo / where, repo)
    assert not (repo / "logs").exists() and not (repo / "junit.xml").exists()


def test_an_empty_or_earlier_output_folder_around_the_workspace_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ws = out / "ws"
    out.mkdir()
    assert _run(out, out) == 0  # empty: fine, and now it is ours
    (out / "ws").mkdir()
    assert _run(out, ws) == 0  # ours (its lock file says so): fine
