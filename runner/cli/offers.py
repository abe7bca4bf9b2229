"""`clore-run offers`: what the Clore market has right now, priced in USD per hour, best first."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.boundary import one_of, say_errors
from runner.cli.options import CoordinatorOption, LedgerOption, usd_option
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk
from runner.core.rental_length import hold_for_s, hours_text
from runner.errors import UsageError

if TYPE_CHECKING:  # the Clore client and models load only when `offers` runs
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.market import Offer

ClientFactory = Callable[[], "CloreClient"]

_COLUMNS = ("ID", "GPUS", "VRAM", "$/H", "SPOT $/H", "RELIAB", "MAX LEN", "CUDA", "COUNTRY")


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the `offers` command to `app`. `client_factory` defaults to CloreClient.from_env."""
    make_client = client_factory or _client_from_env

    @app.command("offers")
    @say_errors
    def offers(
        gpu: Annotated[str | None, typer.Option(help="GPU type, a substring: 4090, 'RTX'")] = None,
        count: Annotated[int, typer.Option(min=1, help="At least this many GPUs")] = 1,
        min_vram: Annotated[float, typer.Option("--min-vram", help="GB per GPU")] = 0.0,
        max_price: Annotated[
            float | None, usd_option("--max-price", help="USD per hour, whole server")
        ] = None,
        spot: Annotated[bool, typer.Option(help="Price and filter by the spot minimum")] = False,
        currency: Annotated[str, typer.Option(help="Order currency")] = "CLORE-Blockchain",
        as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
        limit: Annotated[int, typer.Option(min=1, help="Show at most this many")] = 20,
        timeout_minutes: Annotated[
            float | None,
            typer.Option(
                "--timeout-minutes",
                min=0.0,
                help="A job's timeout: offers whose maximum rental length (MAX LEN) cannot "
                "hold it, with the boot bound before and fetching files after, are passed over "
                "and said so, as `run` passes them over",
            ),
        ] = None,
        ledger_arg: LedgerOption = None,
        coordinator: CoordinatorOption = None,
    ) -> None:
        """List the offers that fit, cheapest expected cost per reliable hour first; hosts
        that failed lately (the host history beside the ledger) are skipped, and said so."""
        from runner.backends.clore.market import (
            explain_no_fit,
            matching_offers,
            skipped_ids,
        )
        from runner.backends.clore.settings import CURRENCIES

        if currency not in CURRENCIES:
            raise UsageError(f"--currency {currency}: {one_of(CURRENCIES)}")
        ask = GpuAsk(
            type=gpu, count=count, min_vram_gb=min_vram, max_usd_per_hour=max_price, spot=spot
        )
        memory, note = _memory(ledger_arg, coordinator)
        all_offers = _fetch_offers(make_client, currency)
        ranked = matching_offers(all_offers, ask, memory=memory)
        passed = _too_short(ranked, timeout_minutes)
        shown = [o for o in ranked if o.server_id not in passed][:limit]
        fitting = {o.server_id for o in matching_offers(all_offers, ask)}
        skipped = {i: why for i, why in skipped_ids(memory).items() if i in fitting}
        if as_json:
            rows = [o.to_json() | {"fail_chance": _chance(memory, o)} for o in shown]
            rows += [{"server_id": i, "skipped": why} for i, why in sorted(skipped.items())]
            rows += [{"server_id": i, "passed_over": why} for i, why in passed.items()]
            typer.echo(json.dumps(rows, indent=2))
            return
        if shown:
            typer.echo(render_table(shown))
        else:
            typer.echo(explain_no_fit(all_offers, ask, currency), err=True)
        for server_id, why in sorted(skipped.items()):
            typer.echo(
                f"#{server_id}: skipped: {why} (`clore-run hosts --clear --host {server_id}`)"
            )
        for server_id, why in passed.items():
            typer.echo(f"#{server_id}: passed over: {why}")
        if note:
            typer.echo(note, err=True)


def _memory(ledger_arg: str | None, coordinator: str | None) -> tuple[HostMemory, str]:
    """The host history beside the ledger, as `run` would read it (empty if none yet)."""
    from runner.stores.hosts import hosts_target, read_memory
    from runner.stores.ledger import DEFAULT_PATH
    from runner.stores.target import coordinator_from, ledger_target

    target = ledger_target(ledger_arg, coordinator_from(coordinator), DEFAULT_PATH)
    return read_memory(hosts_target(target))


def _too_short(ranked: list[Offer], timeout_minutes: float | None) -> dict[int, str]:
    """The offers whose maximum rental length cannot hold a job of `timeout_minutes` (with
    `run`'s default boot bound and fetching its files), best first, each with why."""
    from runner.backends.clore import bill  # the Clore backend loads only when `offers` runs

    if timeout_minutes is None:
        return {}
    hold_s = hold_for_s(bill.DEFAULT_BOOT_BOUND_S, timeout_minutes * 60.0)
    return {
        o.server_id: (
            f"maximum rental length {hours_text(o.max_rental_s)} cannot hold a "
            f"{timeout_minutes:g}-minute job's worst case {hours_text(hold_s)} "
            "(boot bound, timeout, fetching files)"
        )
        for o in ranked
        if o.max_rental_s is not None and o.max_rental_s < hold_s
    }


def _chance(memory: HostMemory, offer: Offer) -> float:
    return round(memory.fail_chance(str(offer.server_id)), 4)


def _client_from_env() -> CloreClient:
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _fetch_offers(make_client: ClientFactory, currency: str) -> list[Offer]:
    from runner.backends.clore import waits
    from runner.backends.clore.fees import read_fee_schedule
    from runner.backends.clore.market import offers_from_servers

    # A missing key, a refused one, an unreachable API: the boundary says each in its shape.
    client = make_client()
    waits.on_stderr(client)
    # The market first: when the API cannot be reached, that is the one wait and the one
    # error; the fees have a documented fallback.
    servers = client.marketplace().servers
    # The account's renter fee rates (or the documented ones): every $/h includes them.
    fees = read_fee_schedule(client, currency)
    return offers_from_servers(servers, currency, fees=fees.rates)


def render_table(offers: list[Offer]) -> str:
    """A plain, aligned table (no colours: it ends up in CI logs)."""
    rows = [_COLUMNS, *(_row(o) for o in offers)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _row(offer: Offer) -> tuple[str, ...]:
    return (
        str(offer.server_id),
        f"{offer.gpu_count}x {_short(offer.gpu_model)}",
        f"{offer.vram_gb:g} GB" if offer.vram_gb is not None else "-",
        _money(offer.on_demand_usd_per_hour),
        _money(offer.spot_usd_per_hour),
        f"{offer.reliability * 100:.1f}%" if offer.reliability is not None else "-",
        hours_text(offer.max_rental_s) if offer.max_rental_s is not None else "-",
        offer.cuda_version or "-",
        offer.location or "-",
    )


def _short(model: str) -> str:
    for prefix in ("NVIDIA GeForce ", "NVIDIA "):
        if model.startswith(prefix):
            return model[len(prefix) :]
    return model


def _money(usd_per_hour: float | None) -> str:
    return f"{usd_per_hour:.3f}" if usd_per_hour is not None else "-"
