"""Shared fixtures. Plugins: fake Clore API, real sshd (added as they land)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner import redact

pytest_plugins: list[str] = ["tests.fakes.clore_api", "tests.sshd_fixture", "tests.pg_fixture"]


@pytest.fixture(autouse=True)
def _no_secrets_from_earlier_tests() -> Iterator[None]:
    """Secrets registered by one test (a run registers its key for the rest of the process)
    must not be masked or redacted in the next: each test starts knowing none."""
    redact.forget_all()
    yield
    redact.forget_all()
