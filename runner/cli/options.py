"""Options that several commands take, declared once so that their names, help and metavars
cannot drift apart between `run`, `serve`, `cleanup` and `pool`. The backends and their help
come from runner.backends.registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.backends.registry import BACKENDS
from runner.stores.ledger import DEFAULT_PATH as DEFAULT_LEDGER
from runner.stores.target import COORDINATOR_ENV, COORDINATOR_FILE_ENV, PASSWORD_SOURCES
from runner.usd import usd_from_text

LedgerOption = Annotated[
    str | None,
    typer.Option(
        "--ledger",
        help="The record of rentals (what `cleanup` cancels): a file or a postgresql:// URL "
        f"without a password (default: {DEFAULT_LEDGER}, or the coordinator)",
        metavar="FILE|URL",
    ),
]
PoolOption = Annotated[
    str | None,
    typer.Option("--pool", help="--backend clore: join this budget pool on the coordinator."),
]
CoordinatorOption = Annotated[
    str | None,
    typer.Option(
        "--coordinator",
        help="The shared PostgreSQL (postgresql://...) of pools, the ledger and serve's queue; "
        f"default ${COORDINATOR_ENV}, else the URL in the file ${COORDINATOR_FILE_ENV} names. "
        "Its password never goes here (every local user can read a command line with ps: it "
        f"is refused): give it by {PASSWORD_SOURCES}.",
        metavar="URL",
    ),
]

BACKEND_NAMES = "|".join(BACKENDS)  # the metavar of --backend: its choices, from the registry


def backend_help(default: str) -> str:
    """--backend's help for `run` and `serve`: the registry's backends, and the default."""
    return f"Where jobs run: {', '.join(BACKENDS)} (default: {default})."


SshHostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--ssh-host",
        help="--backend ssh: USER@HOST[:PORT] (repeat for more hosts).",
        metavar="USER@HOST[:PORT]",
    ),
]
IdentityOption = Annotated[
    Path | None, typer.Option(help="--backend ssh: private key file (default ~/.ssh/id_*).")
]


def usd_option(*names: str, help: str) -> typer.models.OptionInfo:
    """A money flag: its text parsed by runner.usd (nan, inf, 0 or less refused, exit 2, the
    flag named), whatever the annotation beside it. Every amount of USD a person types on the
    command line is declared with this."""
    return typer.Option(*names, help=help, metavar="USD", parser=usd_from_text)  # type: ignore[no-any-return]
