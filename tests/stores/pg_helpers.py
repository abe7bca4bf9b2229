"""Helpers for tests on the private PostgreSQL cluster."""

from __future__ import annotations

from urllib.parse import quote


def at(url: str, when: str) -> str:
    """`url` for sessions whose database clock (clore_run_now()) stands at `when` (ISO 8601)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-c clore_run.now={when}')}"
