"""What the jobs of a queue server can learn of its secrets (CLORE_RUN_TOKEN, CLORE_API_KEY)."""

from __future__ import annotations

import ctypes
import socket
import sys
from pathlib import Path

import pytest
import uvicorn

from runner.serve.backends import BackendChoice
from runner.serve.server_cmd import ServeOptions, run_server
from tests.serve.harness import TOKEN

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="prctl and /proc are Linux's")


def _prctl(option: int, value: int = 0) -> int:
    return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))


def test_serve_makes_its_environment_unreadable_to_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Popping the token from os.environ leaves it in the environment block the kernel shows
    # as /proc/<pid>/environ, which a local job (same user) could read. Not once the process
    # is non-dumpable: then /proc/<pid>/environ and /proc/<pid>/mem belong to root.
    seen: dict[str, int] = {}

    def run(self: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        seen["dumpable"] = _prctl(PR_GET_DUMPABLE)
        for sock in sockets or ():
            sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setenv("CLORE_RUN_TOKEN", TOKEN)
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    options = ServeOptions("127.0.0.1", 0, tmp_path / "q.db", BackendChoice("local"), 1, None)
    try:
        run_server(options)
    finally:
        _prctl(PR_SET_DUMPABLE, 1)  # the rest of the test session
    assert seen["dumpable"] == 0
