"""`clore-run doctor [--canary] [--gpu T]`: check a Clore key before the first real run.

Exit 0 when the key, the balance in the run's currency, the fee rates and the marketplace are
fine (and, with --canary, a rental came up, answered SSH and was given back); 3 with what is
wrong otherwise. The key itself is never printed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner.cli.boundary import EXIT_INTERRUPTED, one_of, say_errors, shaped
from runner.core.model import GpuAsk
from runner.errors import CloreRunError, InfrastructureError, UsageError
from runner.stores.ledger import DEFAULT_PATH

if TYPE_CHECKING:  # the Clore client loads only when doctor runs
    from runner.backends.clore.api import CloreClient
    from runner.backends.clore.doctor import CanaryTools
    from runner.backends.clore.market import Offer

ClientFactory = Callable[[], "CloreClient"]
ToolsFactory = Callable[["CloreClient", Path], "CanaryTools"]


def register(
    app: typer.Typer,
    client_factory: ClientFactory | None = None,
    tools_factory: ToolsFactory | None = None,
) -> None:
    """Add `doctor` to `app`; the factories default to the real API, clock and SSH."""
    make_client = client_factory or _client_from_env
    make_tools = tools_factory or _real_tools

    @app.command("doctor")
    @say_errors
    def doctor(
        canary: Annotated[
            bool,
            typer.Option(
                help="Also rent the cheapest fitting server for at most 5 minutes, connect over "
                "SSH, run nvidia-smi -L and give it back (costs a few cents at most), reading "
                "my_orders every few seconds meanwhile: a table says which assumptions about its "
                "replies held, and doctor fails when one is contradicted."
            ),
        ] = False,
        gpu: Annotated[str | None, typer.Option(help="GPU type, a substring: 4090, 'RTX'")] = None,
        currency: Annotated[str, typer.Option(help="Order currency")] = "CLORE-Blockchain",
        ledger_path: Annotated[
            Path, typer.Option("--ledger", help="The rental ledger.", metavar="FILE")
        ] = DEFAULT_PATH,
        capture: Annotated[
            Path | None,
            typer.Option(
                "--capture",
                help="With --canary: write every my_orders reply from the create until after "
                "the cancel (redacted) to FILE as JSON lines.",
                metavar="FILE",
            ),
        ] = None,
        spot: Annotated[
            bool, typer.Option(help="With --canary: rent a spot order (checks its echo).")
        ] = False,
    ) -> None:
        """Check the API key, balances, fee rates and marketplace; with --canary, rent once."""
        from runner.backends.clore import doctor as checks
        from runner.backends.clore import waits
        from runner.backends.clore.settings import CURRENCIES

        if currency not in CURRENCIES:
            raise UsageError(f"--currency {currency}: {one_of(CURRENCIES)}")
        if capture is not None and not canary:
            raise UsageError("--capture needs --canary", "it records the canary's rental")
        ask = GpuAsk(type=gpu, spot=spot)
        client = make_client()  # a missing key: said by the boundary, with how to set one
        waits.on_stderr(client)
        found = checks.check_account(client, currency, ask, typer.echo)
        if found.problems:
            raise InfrastructureError(_problems(found.problems), "; ".join(found.hints))
        if canary:
            tools = make_tools(client, ledger_path)
            _canary(tools, currency, ask, found.offers[0], capture)
        typer.echo("doctor: all checks passed")


def _canary(
    tools: CanaryTools, currency: str, ask: GpuAsk, offer: Offer, capture: Path | None
) -> list[str]:
    """The canary under `run`'s signal handling: SIGINT, SIGTERM and SIGHUP stop it, its order
    is given back, and doctor exits 130. Its lines are said as they come."""
    from runner.backends.clore.doctor import run_canary
    from runner.engine.run_command import stop_on_signals

    stopped: list[str] = []
    cancel = threading.Event()

    def stop(why: str) -> None:
        stopped.append(why)
        cancel.set()

    with stop_on_signals(stop):
        try:
            lines = run_canary(tools, currency, ask, offer, cancel, typer.echo, capture)
        except CloreRunError as exc:
            if not stopped:
                raise
            _interrupted(f"{stopped[0]}: {exc}")
    if stopped:  # it came after the order was given back: the canary did finish
        _interrupted(f"{stopped[0]} after the canary gave its order back")
    return lines


def _interrupted(message: str) -> NoReturn:
    typer.echo(shaped(message), err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _client_from_env() -> CloreClient:
    from runner.backends.clore.api import CloreClient

    return CloreClient.from_env()


def _real_tools(client: CloreClient, ledger_path: Path) -> CanaryTools:
    from runner.backends.clore.doctor import CanaryTools, canary_options
    from runner.backends.ssh.keys import ClientKey, HostKeyStore
    from runner.stores.ledger.sqlite import SqliteLedger

    return CanaryTools(
        client=client,
        clock=client.limiter.clock,
        ledger=SqliteLedger(ledger_path),
        key=ClientKey.generate(),
        host_keys=HostKeyStore(),
        options=canary_options(),
    )


def _problems(problems: list[str]) -> str:
    """One problem as it is; several in one line, each said once."""
    if len(problems) == 1:
        return problems[0]
    return f"doctor found {len(problems)} problems: " + "; ".join(problems)
