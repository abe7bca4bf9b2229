"""Schemathesis fuzzes the API from its own OpenAPI document: the quick profile CI runs.

Every check but one (see _EXCLUDED), so the document is as strict as the server: no 5xx, replies
as documented (status, content type, headers, schema), a request the document allows is
accepted and one it forbids is refused, OPTIONS names every method, links lead somewhere. Its
CLI runs in a subprocess against the server in this process. Jobs it manages to queue run on a
backend that runs nothing (fuzzed strings are not shell scripts anyone should execute).
Generated bodies go through tests/serve/schemathesis_hooks.py, which takes out what JSON Schema
cannot say (needs naming jobs of the same file, a matrix's size); what it takes out, and why,
is written there.
"""

from __future__ import annotations

import importlib.util
import os
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
_REPO = Path(__file__).resolve().parents[2]
# use_after_free expects a DELETE to remove the resource; DELETE /jobs/{id} cancels a job, which
# stays readable (as `cancelled`) with its attempts and cost.
_EXCLUDED = "use_after_free"
QUICK_EXAMPLES = 25  # per operation and phase: about 1,400 requests, 25 s here
# The stateful phase chains calls along the document's links; left to its defaults it grows with
# every operation that accepts what it is sent (212 scenarios, 120 s on a loaded machine), so
# it is bounded as the other phases are by QUICK_EXAMPLES.
_CONFIG = """
[phases.stateful]
max-steps = 4

[phases.stateful.generation]
max-examples = 10
"""


@pytest.mark.slow
def test_the_api_is_as_strict_as_its_document(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.serve.schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
    }
    config = tmp_path / "schemathesis.toml"
    config.write_text(_CONFIG)
    with thread_server(tmp_path, backend=PassingBackend()) as srv:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                _CLI,
                "--config-file",
                str(config),
                "run",
                f"{srv.api.url}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                _EXCLUDED,
                "--max-examples",
                str(QUICK_EXAMPLES),
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--generation-deterministic",
                "--workers",
                "1",
                "--continue-on-failure",
                "--no-color",
                "--request-timeout",
                "10",
            ],
            capture_output=True,
            text=True,
            timeout=170,
            cwd=tmp_path,
            env=env,
        )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    counted = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert counted is not None, result.stdout[-2000:]
    generated, passed = map(int, counted.groups())
    assert generated == passed and generated > 500  # it really exercised the API
    # Fuzzed ids name no job, so DELETE /jobs/{job_id} answers 404 to most of them, and no
    # fuzzed file name is an artifact a job kept: the warnings taken as expected. Any other
    # warning fails, as an issue does.
    warnings = result.stdout.split("=== WARNINGS ===")[1:]
    expected = {"DELETE /jobs/{job_id}", "GET /jobs/{job_id}/artifacts/{name}"}
    assert "No issues found" in result.stdout or (
        warnings and set(re.findall(r"^\s+- (\S+ \S+)$", warnings[0], re.M)) <= expected
    ), result.stdout[-3000:]
