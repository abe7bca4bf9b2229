"""Options that several commands take, declared once so that their names, help and metavars
cannot drift apart between `run`, `serve`, `cleanup` and `pool`."""

from __future__ import annotations

from typing import Annotated

import typer

from runner.ledger import DEFAULT_PATH as DEFAULT_LEDGER
from runner.stores.target import COORDINATOR_ENV

LedgerOption = Annotated[
    str | None,
    typer.Option(
        "--ledger",
        help="The record of rentals (what `cleanup` cancels): a file or a postgresql:// URL "
        f"(default: {DEFAULT_LEDGER}, or the coordinator)",
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
        f"default ${COORDINATOR_ENV}.",
        metavar="URL",
    ),
]
