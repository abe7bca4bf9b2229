"""Schemathesis fuzzes the API from its own OpenAPI spec: no input may get a 5xx.

Its CLI runs in a subprocess against the server in this process. Jobs it manages to queue run on
a backend that runs nothing (fuzzed strings are not shell scripts anyone should execute).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.passing_backend import PassingBackend
from tests.serve.harness import TOKEN, thread_server

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("schemathesis") is None,
    reason="schemathesis is not installed (pip install -e '.[test]')",
)

_CLI = "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())"


def test_no_generated_request_gets_a_server_error(tmp_path: Path) -> None:
    with thread_server(tmp_path, backend=PassingBackend()) as srv:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                _CLI,
                "run",
                f"{srv.api.url}/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "60",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--generation-deterministic",
                "--no-color",
                "--request-timeout",
                "10",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    counted = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert counted is not None, result.stdout[-2000:]
    generated, passed = map(int, counted.groups())
    assert generated == passed and generated > 100  # it really exercised the API
