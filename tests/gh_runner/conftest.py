"""The runner tests' total: every order they made, and none left live (each test checks its
own; this says the figure for the whole set, with `-s`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gh_runner.harness import CREATED, LEAKED


@pytest.fixture(scope="session", autouse=True)
def _no_order_leaked_over_all_runner_tests() -> Iterator[None]:
    yield
    if CREATED:
        print(f"\nrunner tests: {len(CREATED)} orders created, {len(LEAKED)} leaked")
    assert LEAKED == [], f"orders leaked over the runner tests: {LEAKED}"
