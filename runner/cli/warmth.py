"""`clore-run warmth`: what warmth would have saved, from a queue's own history.

It reads the queue database `serve` keeps (the same --db), replays the last --days through
serve's core with keep-warm 0, 5, 15 and 60 minutes and with the warmth given here
(--keep-warm, --warm, --idle-budget, as `serve` takes them), and prints, for each, the jobs'
waits for a server, how many found one warm, the orders, and the money (idle apart).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Annotated

import typer

from runner.cli.options import usd_option
from runner.cli.serve import DEFAULT_DB
from runner.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("warmth")(warmth)


def warmth(
    db: Annotated[
        str, typer.Option(help="The queue database serve keeps (a file or a postgresql:// URL).")
    ] = DEFAULT_DB,
    days: Annotated[float, typer.Option(min=0.01, help="How many past days to replay.")] = 7.0,
    concurrency: Annotated[int, typer.Option(min=1, help="Servers held at once, as serve's.")] = 3,
    keep_warm: Annotated[
        float, typer.Option(help="Also replay this keep-warm.", metavar="MINUTES")
    ] = 0.0,
    warm: Annotated[
        list[str] | None,
        typer.Option(help="Also replay these --warm pools (as serve takes them).", metavar="POOL"),
    ] = None,
    idle_budget: Annotated[float | None, usd_option(help="The idle budget, USD a UTC day.")] = None,
    boot_seconds: Annotated[
        float | None,
        typer.Option(help="A boot's seconds (default: what the history's cold starts took)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """What warmth would save: the queue's history replayed at keep-warm 0/5/15/60 min."""
    from runner.serve.warm_flags import warm_policy
    from runner.serve.what_if import read_history, table, what_if
    from runner.stores.queue import open_queue
    from runner.stores.target import argument_url, is_postgres_url

    asked = warm_policy(keep_warm, warm or (), idle_budget)
    if boot_seconds is not None and not 0 < boot_seconds < 86_400:
        raise UsageError(f"--boot-seconds {boot_seconds}: a boot takes between 0 and a day")
    where: Path | str = argument_url(db, "--db") if is_postgres_url(db) else Path(db)
    if isinstance(where, Path) and not where.exists():
        raise UsageError(f"--db {db}: no such queue database", hint="pass serve's --db")
    store = open_queue(where)
    try:
        until = time.time()
        history = read_history(store, until - days * 86_400, until, concurrency, boot_seconds)
    finally:
        store.close()
    rows = what_if(history, asked, concurrency)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return
    boot = "measured" if history.boot_measured else "assumed"
    typer.echo(
        f"{len(history.arrivals)} jobs of the last {days:g} days; a boot {history.boot_s:.0f} s "
        f"({boot}); waits are from asking for a server to starting on one"
    )
    typer.echo(table(rows))
