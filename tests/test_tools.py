"""The test extra's tools are found beside the interpreter, PATH or not (tests/tools.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools import installed


def test_a_tool_beside_the_interpreter_is_found_off_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to("/nonexistent/python3")  # a venv's python links out of it
    tool = bin_dir / "no-such-tool-here"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert installed("no-such-tool-here", interpreter=str(bin_dir / "python")) == str(tool)


def test_a_file_that_cannot_run_is_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "no-such-tool-here").write_text("not a program")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert installed("no-such-tool-here", interpreter=str(tmp_path / "python")) is None
