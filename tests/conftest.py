"""Shared fixtures. Plugins: fake Clore API, real sshd (added as they land)."""

pytest_plugins: list[str] = []
