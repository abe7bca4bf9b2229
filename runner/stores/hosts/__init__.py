"""The host history: what each marketplace host did when a run rented it, across runs.

One row per event (`up` with its create -> SSH seconds, `never_up`, `ssh_failed`, `preempted`);
the pure rules that read them are runner/core/hosts.py. It lives beside the ledger: a SQLite
file `hosts.db` next to the ledger file (sqlite.py), or a table in the same PostgreSQL database
(postgres.py); the rows and their rules are written once for both (rows.py), as the ledger's are.

The history is advice, not a record of money: a write that fails is reported and dropped (a
run does not stop because it could not remember a host), and a file that cannot be read is an
empty history. Rows older than `KEEP_S` are dropped when the store opens, so it stays small.
"""

from __future__ import annotations

from pathlib import Path

from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.hosts import HostMemory
from runner.stores.hosts.rows import KEEP_S, HostHistory, HostHistoryError
from runner.stores.hosts.sqlite import FILE_NAME, SqliteHosts
from runner.stores.target import is_postgres_url, require_psycopg

__all__ = [
    "FILE_NAME",
    "KEEP_S",
    "HostHistory",
    "HostHistoryError",
    "hosts_target",
    "open_hosts",
    "read_memory",
]


def hosts_target(ledger: str | Path) -> str | Path:
    """Where the host history of a ledger lives: beside its file, or in its database."""
    if is_postgres_url(ledger):
        return ledger
    return Path(ledger).parent / FILE_NAME


def open_hosts(target: str | Path, *, clock: Clock = SYSTEM_CLOCK) -> HostHistory:
    """The host history at `target`: a SQLite file path, or a PostgreSQL URL."""
    if is_postgres_url(target):
        require_psycopg()
        from runner.stores.hosts.postgres import PostgresHosts  # psycopg only when asked for

        return PostgresHosts(str(target), clock=clock)
    return SqliteHosts(Path(target), clock=clock)


def read_memory(target: str | Path, *, clock: Clock = SYSTEM_CLOCK) -> tuple[HostMemory, str]:
    """The history as of now (empty when none was written yet: no file is made for a look),
    and a note for a person when it could not be read (advice: the look goes on without it)."""
    if not is_postgres_url(target) and not Path(target).exists():
        return HostMemory(now=clock.time()), ""
    try:
        with open_hosts(target, clock=clock) as history:
            memory = history.memory()
            return memory, "; ".join(history.take_notes())
    except HostHistoryError as exc:
        return HostMemory(now=clock.time()), f"the host history was not read: {exc}"
