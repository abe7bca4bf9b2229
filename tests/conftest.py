"""Shared fixtures. Plugins: fake Clore API, real sshd (added as they land)."""

pytest_plugins: list[str] = ["tests.fakes.clore_api", "tests.sshd_fixture", "tests.pg_fixture"]
