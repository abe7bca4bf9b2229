"""Fixtures for the report tests: a clean environment and the golden-file check."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from runner import __version__

GOLDEN = Path(__file__).parent / "golden"

# Variables the reports read from the environment; tests set the ones they need.
_ENV_READ = (
    "GITHUB_ACTIONS",
    "GITHUB_SERVER_URL",
    "GITHUB_REPOSITORY",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_REF_NAME",
    "GITHUB_SHA",
    "GITHUB_EVENT_NAME",
    "GITHUB_EVENT_PATH",
    "GITHUB_OUTPUT",
    "GITHUB_STEP_SUMMARY",
    "GITHUB_API_URL",
    "GITHUB_TOKEN",
    "GITHUB_WORKSPACE",
    "CLORE_API_KEY",
    "CLORE_GITHUB_TOKEN",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV_READ:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def golden() -> Callable[[str, str], None]:
    """Compare text with tests/report/golden/NAME; UPDATE_GOLDEN=1 rewrites the file instead."""

    def check(name: str, actual: str) -> None:
        actual = actual.replace(f"clore-run {__version__}", "clore-run VERSION")
        path = GOLDEN / name
        if os.environ.get("UPDATE_GOLDEN") == "1":
            path.write_text(actual, encoding="utf-8")
        expected = path.read_text(encoding="utf-8")
        assert actual == expected, f"{name} differs; UPDATE_GOLDEN=1 pytest to accept the change"

    return check
