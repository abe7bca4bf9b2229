"""What `--ledger`, `--db` and `--coordinator` name: a SQLite file path or a PostgreSQL URL.

The URL of the shared PostgreSQL (the coordinator) is a secret when it holds a password. It
comes from the environment ($CLORE_RUN_COORDINATOR), from a file ($CLORE_RUN_COORDINATOR_FILE),
or leaves the password to libpq ($PGPASSWORD, ~/.pgpass or $PGPASSFILE, a service file named
by `?service=`). Never from the command line: every local user reads that with `ps`, so a
password in a URL given as an argument is refused. The variables are secrets to the rest of
clore-run (runner.redact): redacted everywhere, out of jobs' environments and of the process's
own environment block (runner.process_guard).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from runner import redact
from runner.errors import UsageError

COORDINATOR_ENV = "CLORE_RUN_COORDINATOR"
COORDINATOR_FILE_ENV = "CLORE_RUN_COORDINATOR_FILE"
PASSWORD_SOURCES = (
    f"${COORDINATOR_ENV} (the whole URL), a file named by ${COORDINATOR_FILE_ENV}, $PGPASSWORD, "
    "~/.pgpass ($PGPASSFILE) or a service file (postgresql://?service=NAME)"
)
_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and urlsplit(target).scheme in _SCHEMES


def check_url(url: str, flag: str) -> str:
    """`url` if it is a usable PostgreSQL URL, else a usage error naming `flag`."""
    parts = urlsplit(url)
    names_one = parts.hostname or parts.path.strip("/") or "service" in parse_qs(parts.query)
    if parts.scheme not in _SCHEMES or not names_one:
        raise UsageError(
            f"{flag}: {redact_url(url)!r} is not a PostgreSQL URL",
            hint="write postgresql://USER@HOST:PORT/DATABASE (or postgresql://?service=NAME)",
        )
    return url


def argument_url(url: str, flag: str) -> str:
    """`check_url` for a URL given on the command line, which must hold no password."""
    check_url(url, flag)
    parts = urlsplit(url)
    if parts.password is not None or "password" in parse_qs(parts.query):
        raise UsageError(
            f"{flag}: the URL holds a password, and every user of this machine can read "
            "a command line (ps)",
            hint=f"leave it out of {flag} and put it in {PASSWORD_SOURCES}",
        )
    return url


def coordinator_from(flag_value: str | None) -> str | None:
    """The shared PostgreSQL: `--coordinator`, else $CLORE_RUN_COORDINATOR, else the URL in
    the file $CLORE_RUN_COORDINATOR_FILE names, else None."""
    if flag_value:
        return argument_url(flag_value, "--coordinator")
    value = os.environ.get(COORDINATOR_ENV, "").strip()
    if value:
        return check_url(value, f"${COORDINATOR_ENV}")
    path = os.environ.get(COORDINATOR_FILE_ENV, "").strip()
    return _url_from_file(Path(path)) if path else None


def _url_from_file(path: Path) -> str:
    where = f"${COORDINATOR_FILE_ENV} ({path})"
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{where}: cannot read it ({reason})") from None
    redact.register(value)  # a secret from here on, as the variables are
    return check_url(value, where)


def libpq_password(url: str) -> dict[str, str]:
    """The password to pass to psycopg.connect beside `url`: $PGPASSWORD, when the URL names
    neither a password nor a service (libpq's own order). process_guard takes PGPASSWORD out
    of the C environment, where libpq would look for it, so it is passed explicitly."""
    password = os.environ.get("PGPASSWORD", "")
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if not password or parts.password is not None or "password" in query or "service" in query:
        return {}
    return {"password": password}


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
        if isinstance(ledger, str):
            return argument_url(ledger, "--ledger")
        return coordinator
    if ledger is None:
        return default
    if isinstance(ledger, str) and is_postgres_url(ledger):
        return argument_url(ledger, "--ledger")
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
        import psycopg  # noqa: F401  (is the PostgreSQL extra installed?)
    except ImportError:
        raise UsageError(
            "a postgresql:// store needs psycopg, which is not installed",
            hint="in a checkout of clore-run: pip install '.[postgres]'",
        ) from None
