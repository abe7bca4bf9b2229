"""Shared fixtures. Plugins: fake Clore API, real sshd (added as they land)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner import redact
from tests.processes import LAUNCHES, kill_marked

pytest_plugins: list[str] = [
    "tests.fakes.clore_api",
    "tests.sshd_fixture",
    "tests.pg_fixture",
    "tests.ci_skips",
    "pytester",
]


@pytest.fixture(autouse=True)
def _no_secrets_from_earlier_tests() -> Iterator[None]:
    """Secrets registered by one test (a run registers its key for the rest of the process)
    must not be masked or redacted in the next: each test starts knowing none."""
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A serve, pool worker or helper a test started (with tests.processes.marked_env) and left
    running is killed after the test (its other fixtures torn down first: this one is set up
    before them), and the test fails naming it."""
    LAUNCHES.begin()
    yield
    left = LAUNCHES.end()
    if left:
        pytest.fail("left running after the test (killed now):\n" + "\n".join(left))


# A test that uses one of these starts (or shares) a real sshd or PostgreSQL: it is slow whether
# or not it says so, so a new one cannot slip into the fast lane.
PROCESS_FIXTURES = frozenset(
    {"sshd_server", "sshd_killable", "ssh_key", "ssh_conn", "pg_cluster", "pg_url"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """What a module's or the session's fixtures started with the mark, when all is done."""
    kill_marked(LAUNCHES.session)
