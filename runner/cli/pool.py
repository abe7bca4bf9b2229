"""`clore-run pool create|show|set`: budget pools shared by every run that joins one.

A pool lives in the shared PostgreSQL named by `--coordinator URL` (or $CLORE_RUN_COORDINATOR).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.options import CoordinatorOption, usd_option
from runner.stores.target import COORDINATOR_ENV, coordinator_from, require_psycopg

if TYPE_CHECKING:
    from runner.stores.pools import PoolUsage
    from runner.stores.pools.postgres import PostgresPools


def register(app: typer.Typer) -> None:
    pool_app = typer.Typer(help="Budget pools shared by many runs (on the coordinator).")
    pool_app.command("create")(create)
    pool_app.command("show")(show)
    pool_app.command("set")(set_)
    app.add_typer(pool_app, name="pool")


def create(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    budget: Annotated[float, usd_option(help="USD, in total (or per UTC day: --per-day).")],
    max_servers: Annotated[int, typer.Option(help="Servers held at once, by all its runs.")],
    per_day: Annotated[bool, typer.Option("--per-day", help="The budget is per UTC day.")] = False,
    coordinator: CoordinatorOption = None,
) -> None:
    """Create a pool. Runs join it with `--pool NAME`."""
    from runner.stores.pools import check_name, check_settings

    check_name(name)  # before connecting: a typo is a usage error, not a database one
    check_settings(budget, max_servers)
    with _pools(coordinator) as pools:
        pools.create(name, budget, per_day=per_day, max_servers=max_servers)
        typer.echo(_line(pools.usage(name)))


def show(
    name: Annotated[str | None, typer.Argument(help="One pool (default: all).")] = None,
    coordinator: CoordinatorOption = None,
) -> None:
    """What each pool allows, holds and has billed, on the database's clock."""
    with _pools(coordinator) as pools:
        names = [name] if name is not None else pools.names()
        if not names:
            typer.echo("no pools: create one with `clore-run pool create NAME ...`")
        for each in names:
            typer.echo(_line(pools.usage(each)))


def set_(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    budget: Annotated[float | None, usd_option(help="New budget, USD.")] = None,
    max_servers: Annotated[int | None, typer.Option(help="New server cap.")] = None,
    per_day: Annotated[
        bool | None, typer.Option("--per-day/--total", help="Budget per UTC day, or in total.")
    ] = None,
    coordinator: CoordinatorOption = None,
) -> None:
    """Change a pool's limits. Lowering them refuses new rentals; none held is revoked."""
    with _pools(coordinator) as pools:
        pools.set(name, budget_usd=budget, per_day=per_day, max_servers=max_servers)
        typer.echo(_line(pools.usage(name)))


def _pools(coordinator: str | None) -> PostgresPools:
    from runner.errors import UsageError

    url = coordinator_from(coordinator)
    if url is None:
        raise UsageError(
            "pools live in the shared database: no coordinator given",
            hint=f"pass --coordinator postgresql://USER@HOST/DB or set {COORDINATOR_ENV}",
        )
    require_psycopg()
    from runner.stores.pools.postgres import PostgresPools

    return PostgresPools(url)


def _line(usage: PoolUsage) -> str:
    s = usage.settings
    window = "per UTC day" if s.per_day else "in total"
    billed = "billed today" if s.per_day else "billed"
    expired = f" ({usage.expired_holders} expired, to reap)" if usage.expired_holders else ""
    return (
        f"{s.name}: ${s.budget_usd:.2f} {window}, at most {s.max_servers} servers | "
        f"{usage.servers} held, ${usage.reserved_usd:.2f} reserved, ${usage.billed_usd:.2f} "
        f"{billed}, ${max(0.0, usage.free_usd):.2f} free | {usage.holders} holders{expired}"
    )
