"""Helpers for tests on the private PostgreSQL cluster."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import psycopg

from tests.processes import marked_env


def at(url: str, when: str) -> str:
    """`url` for sessions whose database clock (clore_run_now()) stands at `when` (ISO 8601)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-c clore_run.now={when}')}"


def open_at_once(url: str, opens: str, processes: int = 5) -> list[tuple[str, int]]:
    """Run the statement `opens` (a store's constructor on `url`, which it reads as `url`) in
    `processes` processes started together; each must succeed. The schema versions then."""
    code = f"import sys\nurl = sys.argv[1]\n{opens}\n"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url], stderr=subprocess.PIPE, env=marked_env()
        )
        for _ in range(processes)
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * processes, errors
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT component, version FROM clore_run_schema ORDER BY 1")
        return [(str(c), int(v)) for c, v in rows.fetchall()]
