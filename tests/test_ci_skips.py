"""CI refuses a skip it was not told to expect (tests/ci_skips.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import ci_skips

REPO = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

def test_needs_a_tool():
    pytest.skip("the tool is not installed")

@pytest.mark.skipif(True, reason="not on this platform")
def test_marked():
    pass

def test_actionlint_passes():
    pytest.skip("actionlint is not installed")

@pytest.mark.xfail(reason="known")
def test_known():
    assert False
"""


def _run(pytester: pytest.Pytester, ci: str) -> pytest.RunResult:
    pytester.makeconftest("pytest_plugins = ['tests.ci_skips']")
    pytester.makepyfile(**{"tests/test_action": SKIPPING})
    pytester.syspathinsert()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CI", ci)
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "tests/test_action.py")


def test_in_ci_a_skip_fails_unless_it_is_allowed(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "true")
    result.assert_outcomes(failed=1, errors=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped in CI (the tool is not installed)*"])
    result.stdout.fnmatch_lines(["*skipped in CI (not on this platform)*"])


def test_outside_ci_a_skip_is_a_skip(pytester: pytest.Pytester) -> None:
    _run(pytester, "").assert_outcomes(skipped=3, xfailed=1)


def test_every_allowed_skip_names_tests_that_exist() -> None:
    """A stale entry would let a renamed test skip unnoticed under its new name."""
    for pattern in ci_skips.ALLOWED_SKIPS:
        path, name = pattern.split("::")
        source = (REPO / path).read_text()
        assert f"def {name.rstrip('*')}" in source, pattern
