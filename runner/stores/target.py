"""What `--ledger`, `--db` and `--coordinator` name: a SQLite file path or a PostgreSQL URL."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runner.errors import UsageError

COORDINATOR_ENV = "CLORE_RUN_COORDINATOR"
_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and urlsplit(target).scheme in _SCHEMES


def check_url(url: str, flag: str) -> str:
    """`url` if it is a usable PostgreSQL URL, else a usage error naming `flag`."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES or not (parts.hostname or parts.path.strip("/")):
        raise UsageError(
            f"{flag}: {redact_url(url)!r} is not a PostgreSQL URL",
            hint="write postgresql://USER@HOST:PORT/DATABASE",
        )
    return url


def coordinator_from(flag_value: str | None) -> str | None:
    """The shared PostgreSQL: `--coordinator`, else $CLORE_RUN_COORDINATOR, else None."""
    value = flag_value if flag_value else os.environ.get(COORDINATOR_ENV, "").strip()
    return check_url(value, "--coordinator") if value else None


def ledger_target(ledger: str | Path | None, coordinator: str | None, default: Path) -> str | Path:
    """Where the ledger lives. With a coordinator it lives there: a reaper on another machine
    must see a dead run's rentals to cancel them, so a local file beside a pool is refused."""
    if coordinator is not None:
        if ledger is not None and not is_postgres_url(ledger):
            raise UsageError(
                f"--ledger {ledger} is a local file, but --coordinator puts the ledger in the "
                "shared database",
                hint="drop --ledger (the coordinator holds the ledger) or give it the same URL",
            )
        return ledger if ledger is not None else coordinator
    if ledger is None:
        return default
    if isinstance(ledger, str) and is_postgres_url(ledger):
        return check_url(ledger, "--ledger")
    return Path(ledger)


def redact_url(url: str) -> str:
    """`url` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def require_psycopg() -> None:
    """A usage error saying how to install the PostgreSQL extra, if it is missing."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise UsageError(
            "a postgresql:// store needs psycopg, which is not installed",
            hint="pip install 'clore-run[postgres]'",
        ) from None
