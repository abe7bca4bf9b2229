"""`clore-run hosts`: what the host history remembers of each marketplace host, and forgetting it.

The history lives beside the ledger (`hosts.db` next to the ledger file, or the coordinator's
database); runs write it, `offers`, `plan` and `run` read it to skip hosts that failed lately
and to rank the rest by expected cost.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from runner.cli.boundary import said
from runner.cli.options import CoordinatorOption, LedgerOption
from runner.core.hosts import HostMemory, HostRecord, ago_text, kind_words
from runner.errors import CloreRunError
from runner.stores.ledger import DEFAULT_PATH
from runner.stores.target import coordinator_from, ledger_target
from runner.untrusted import console_line

_COLUMNS = ("HOST", "UP", "MEAN BOOT", "NEVER UP", "SSH FAILED", "PREEMPTED", "LAST", "NOW")


def register(app: typer.Typer) -> None:
    app.command("hosts")(hosts)


def hosts(
    ledger_arg: LedgerOption = None,
    coordinator: CoordinatorOption = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Forget the hosts (all, or those named with --host).")
    ] = False,
    host: Annotated[
        list[str] | None, typer.Option("--host", help="Only this host (server id); repeatable.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """List what past runs saw of each host (boots, failures, skips), or forget it."""
    from runner.stores.hosts import hosts_target, open_hosts

    try:
        where = hosts_target(ledger_target(ledger_arg, coordinator_from(coordinator), DEFAULT_PATH))
        with open_hosts(where) as history:
            if clear:
                gone = sum(history.clear(h) for h in host) if host else history.clear()
                typer.echo(f"forgot {gone} event(s) of {', '.join(host) if host else 'every host'}")
                return
            memory = history.memory()
            for note in history.take_notes():
                typer.echo(f"warning: {note}", err=True)
    except CloreRunError as exc:
        typer.echo(said(exc), err=True)
        raise typer.Exit(3) from None
    shown = [r for h, r in sorted(memory.hosts.items()) if not host or h in host]
    if as_json:
        typer.echo(json.dumps([_json(r, memory) for r in shown], indent=2))
    elif shown:
        typer.echo(render_table(shown, memory))
        market = memory.market
        typer.echo(
            f"market: {market.failures} of {market.boots} boots failed; failed-boot chance "
            f"{market.fail_rate * 100:.0f} %, healthy boot {memory.expected_boot_s():.0f} s"
        )
    else:
        typer.echo(f"no host remembered in {where}")


def _json(rec: HostRecord, memory: HostMemory) -> dict[str, Any]:
    return {
        "host": rec.host,
        "ups": rec.ups,
        "mean_boot_s": rec.mean_boot_s,
        "never_up": rec.never_up,
        "ssh_failed": rec.ssh_failed,
        "preempted": rec.preempted,
        "last": rec.last_kind,
        "last_at": rec.last_at,
        "fail_chance": round(memory.fail_chance(rec.host), 4),
        "skipped": memory.skip_reason(rec.host),
    }


def render_table(records: list[HostRecord], memory: HostMemory) -> str:
    rows = [_COLUMNS, *(_row(r, memory) for r in records)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _row(rec: HostRecord, memory: HostMemory) -> tuple[str, ...]:
    mean = rec.mean_boot_s
    last = (
        f"{kind_words(rec.last_kind)} {ago_text(memory.now - rec.last_at)} ago"
        if rec.last_kind
        else "-"
    )
    skipped = memory.skip_reason(rec.host)
    return (
        # The file may come from a cache a pull request's run wrote: its text is shown as
        # marketplace text is, inert (no workflow command, no control sequence).
        console_line(rec.host),
        str(rec.ups),
        f"{mean:.0f} s" if mean is not None else "-",
        str(rec.never_up),
        str(rec.ssh_failed),
        str(rec.preempted),
        last,
        "skipped" if skipped else "ok",
    )
