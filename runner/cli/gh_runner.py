"""`clore-run runner start|stop`: an ephemeral GitHub Actions runner on a rented Clore GPU.

start: exit 0 with the label(s) printed (and, in Actions, the outputs `label`, `labels`,
`record`); 2 for bad options; 3 when renting, registering or installing failed (everything
given back); 130 on a signal (everything given back). stop: 0 when every server is cancelled
(or was not ours to cancel), 3 when one may still be billed. Secrets (the Clore key, the runner
token, the JIT config) are never printed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner.cli.boundary import said as said_error
from runner.cli.boundary import shaped
from runner.cli.options import CoordinatorOption, LedgerOption, PoolOption, usd_option
from runner.errors import CloreRunError, UsageError
from runner.gh_runner.wiring import TOKEN_ENV, Wiring

if TYPE_CHECKING:
    from runner.backends.runner_host import RunnerHosting
    from runner.gh_runner.github import RunnerApi, Scope
    from runner.gh_runner.record import RunnerRecord
    from runner.gh_runner.remote import RunnerPackage
    from runner.gh_runner.start import StartRequest
    from runner.gh_runner.stop import Stopped
    from runner.stores.pools.seat import PoolSeat

DEFAULT_RECORD = Path(".clore-run/runner-record.json")
# The backend a runner is rented on when --backend is not given, and the one `stop` cancels
# a record's servers on (a record is only ever made there).
RUNNER_BACKEND = "clore"


def register(app: typer.Typer, wiring: Wiring | None = None) -> None:
    wired = wiring or Wiring()
    runner_app = typer.Typer(
        help="An ephemeral GitHub Actions runner on a rented Clore GPU (runs-on: its label)."
    )
    runner_app.command("start")(_start_command(wired))
    runner_app.command("stop")(_stop_command(wired))
    app.add_typer(runner_app, name="runner")


def _start_command(wiring: Wiring) -> Callable[..., None]:
    def start(
        max_minutes: Annotated[
            float,
            typer.Option(
                help="Hard cap on each rental's life, from its create: the runner stops "
                "then, and `cleanup --runners` cancels the order."
            ),
        ] = 60.0,
        gpu: Annotated[str | None, typer.Option(help="GPU type, a substring: 4090, 'RTX'")] = None,
        gpu_count: Annotated[int, typer.Option(help="GPUs per server.")] = 1,
        min_vram: Annotated[float, typer.Option(help="GB per GPU.")] = 0.0,
        max_price: Annotated[
            float | None, usd_option(help="USD per hour for the server, renter fee included.")
        ] = None,
        spot: Annotated[bool, typer.Option("--spot", help="Rent spot (can be outbid).")] = False,
        image: Annotated[str | None, typer.Option(help="Docker image the job runs in.")] = None,
        runners: Annotated[int, typer.Option(help="How many runners (one server each).")] = 1,
        currency: Annotated[str, typer.Option(help="Order currency.")] = "CLORE-Blockchain",
        budget: Annotated[
            float | None, usd_option(help="USD: the runners' worst case must fit.")
        ] = None,
        repo: Annotated[
            str | None, typer.Option(help="OWNER/NAME to register on (default $GITHUB_REPOSITORY).")
        ] = None,
        org: Annotated[str | None, typer.Option(help="Register on this organization.")] = None,
        runner_group: Annotated[int, typer.Option(help="Runner group id (1: default).")] = 1,
        runner_url: Annotated[
            str | None, typer.Option(help="Runner package URL (default: the pinned release).")
        ] = None,
        runner_sha256: Annotated[
            str | None, typer.Option(help="Its SHA-256 (with --runner-url; empty: unchecked).")
        ] = None,
        runner_user: Annotated[
            str, typer.Option(help="auto (a non-root user if the image can make one) or a name.")
        ] = "auto",
        record_file: Annotated[
            Path, typer.Option("--record-file", help="Where the rental record is written.")
        ] = DEFAULT_RECORD,
        ledger_arg: LedgerOption = None,
        pool: PoolOption = None,
        coordinator: CoordinatorOption = None,
        backend: Annotated[
            str, typer.Option(help="The backend that rents the servers (one that hosts runners).")
        ] = RUNNER_BACKEND,
    ) -> None:
        """Rent server(s), register a just-in-time runner on each, print the label(s)."""
        from runner.backends.clore.settings import CURRENCIES
        from runner.backends.registry import runner_hosting
        from runner.core.model import GpuAsk
        from runner.gh_runner.start import StartRequest

        try:
            hosting = runner_hosting(backend)
        except CloreRunError as exc:
            _usage(exc.message, exc.hint)
        if currency not in CURRENCIES:
            _usage(f"--currency must be one of {', '.join(CURRENCIES)}")
        if max_minutes <= 0 or runners < 1 or gpu_count < 1:
            _usage("--max-minutes, --runners and --gpu-count must be positive")
        if max_minutes > 24 * 60:  # the reaper's default bound on a runner's life
            _usage("--max-minutes is at most 1440 (24 h): the reaper cancels a runner then")
        ask = GpuAsk(
            type=gpu, count=gpu_count, min_vram_gb=min_vram, max_usd_per_hour=max_price, spot=spot
        )
        package = _package(runner_url, runner_sha256, runner_user)
        request = StartRequest(
            ask=ask,
            max_minutes=max_minutes,
            run_id=_run_id(wiring),
            runners=runners,
            image=image,
            budget_usd=budget,
            group_id=runner_group,
            package=package,
        )
        try:
            scope = _scope(repo, org, wiring)
        except CloreRunError as exc:
            _usage(str(exc))
        _do_start(
            wiring, hosting, request, scope, currency, record_file, ledger_arg, pool, coordinator
        )

    return start


def _do_start(
    wiring: Wiring,
    hosting: RunnerHosting,
    request: StartRequest,
    scope: Scope,
    currency: str,
    record_file: Path,
    ledger_arg: str | None,
    pool: str | None,
    coordinator: str | None,
) -> None:
    from runner.backends.runner_host import RunnerHostTools
    from runner.backends.ssh.keys import HostKeyStore
    from runner.gh_runner.package import cache_folder, fetch_package
    from runner.gh_runner.publish import publish_start, write_record
    from runner.gh_runner.start import StartTools, start_runners
    from runner.stores.ledger import DEFAULT_PATH, open_ledger
    from runner.stores.target import coordinator_from, ledger_target

    token = _runner_token(wiring)
    try:
        shared = coordinator_from(coordinator)
        client = wiring.api_client(hosting)
        ledger_path = ledger_target(ledger_arg, shared, DEFAULT_PATH)
        key = wiring.key()
        options = wiring.provision_options(hosting)
        with open_ledger(ledger_path) as ledger:
            host = hosting.build(
                RunnerHostTools(
                    client=client,
                    clock=wiring.clock,
                    ledger=ledger,
                    ledger_path=ledger_path,
                    run_id=request.run_id,
                    key=key,
                    host_keys=HostKeyStore(),
                    currency=currency,
                    options=options,
                    hedge=wiring.hedge,
                )
            )
            try:
                seat = _seat(pool, shared, request, host.boot_bound_s)
            except BaseException:
                host.close()
                raise
            tools = StartTools(
                host=host,
                clock=wiring.clock,
                github=wiring.github(token, scope, wiring.env),
                seat=seat,
                fetch_package=lambda package: fetch_package(package, cache_folder(wiring.env)),
            )
            with _cancel_on_signals() as cancel:
                record = start_runners(request, tools, cancel, typer.echo)
    except CloreRunError as exc:
        typer.echo(said_error(exc), err=True)
        raise typer.Exit(exc.exit_code) from None
    write_record(record, record_file)
    publish_start(record, record_file, wiring.env)
    for rental in record.runners:
        typer.echo(f"label: {rental.label}")
    typer.echo(f"record: {record_file} (give it to `clore-run runner stop --record`)")


def _seat(
    pool: str | None, coordinator: str | None, request: StartRequest, boot_bound_s: float
) -> PoolSeat | None:
    if pool is None:
        return None
    from runner.gh_runner.pool import join

    return join(pool, coordinator, request.run_id, request.max_minutes, boot_bound_s)


def _stop_command(wiring: Wiring) -> Callable[..., None]:
    def stop(
        record: Annotated[
            Path | None, typer.Option("--record", help="The record file start wrote.")
        ] = None,
        record_json: Annotated[
            str | None,
            typer.Option("--record-json", help="The record itself (the start job's output)."),
        ] = None,
        comment: Annotated[
            str, typer.Option(help="PR comment section: auto (pull_request events), true, false.")
        ] = "auto",
        comment_header: Annotated[
            str, typer.Option(help="The sticky comment to add the section to.")
        ] = "",
        coordinator: CoordinatorOption = None,
        repo: Annotated[
            str | None,
            typer.Option(help="OWNER/NAME the runners are on (default $GITHUB_REPOSITORY)."),
        ] = None,
        org: Annotated[str | None, typer.Option(help="Or this organization.")] = None,
    ) -> None:
        """Remove the runners' registrations, cancel their servers, report what they cost."""
        from runner.backends.registry import runner_hosting
        from runner.gh_runner.publish import publish_stop
        from runner.gh_runner.report import runners_markdown
        from runner.gh_runner.stop import stop_runners

        if comment not in ("auto", "true", "false"):
            _usage("--comment must be auto, true or false")
        try:
            parsed = _read_record(record, record_json)
        except CloreRunError as exc:
            typer.echo(said_error(exc), err=True)
            raise typer.Exit(exc.exit_code) from None
        token = wiring.env.get(TOKEN_ENV, "").strip()
        env = wiring.env

        def api_for(scope: Scope) -> RunnerApi:
            return wiring.github(token, scope, env)

        try:
            client = wiring.api_client(runner_hosting(RUNNER_BACKEND))
            scope = _stop_scope(repo, org, wiring)
            stopped = stop_runners(
                parsed, client, wiring.clock, api_for if token else None, scope=scope
            )
        except CloreRunError as exc:
            typer.echo(said_error(exc), err=True)
            raise typer.Exit(exc.exit_code) from None
        typer.echo(runners_markdown(stopped))
        _settle_pool(parsed, stopped, coordinator)
        said = publish_stop(stopped, env, comment, comment_header, wiring.http())
        if said:
            typer.echo(said)
        left = [s for s in stopped if not s.released.settled]
        if left:
            typer.echo(
                shaped(
                    f"{len(left)} server(s) may still be billed",
                    "run `clore-run cleanup --runners`, or cancel them on clore.ai",
                ),
                err=True,
            )
            raise typer.Exit(3)

    return stop


def _settle_pool(record: RunnerRecord, stopped: list[Stopped], coordinator: str | None) -> None:
    """The runners' reservations in the start's pool, settled at what was billed."""
    if record.pool is None:
        return
    from runner.gh_runner.pool import settle
    from runner.stores.target import coordinator_from

    try:
        shared = coordinator_from(coordinator)
    except CloreRunError as exc:
        typer.echo(f"warning: {exc}", err=True)
        shared = None
    typer.echo(settle(record, stopped, shared))


def _read_record(path: Path | None, text: str | None) -> RunnerRecord:
    from runner.gh_runner.record import parse_record

    if (path is None) == (text is None):
        _usage("give the record once: --record FILE or --record-json TEXT")
    if text is not None:
        return parse_record(text)
    assert path is not None
    try:
        return parse_record(path.read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None


def _run_id(wiring: Wiring) -> str:
    """Unique to this start (two starts of one workflow run share its id and attempt): the
    ledger's run id and, in a pool, the lease's holder, the same string."""
    import secrets  # only a start makes a run id

    env = wiring.env
    run, attempt = env.get("GITHUB_RUN_ID", ""), env.get("GITHUB_RUN_ATTEMPT", "1")
    tail = secrets.token_hex(3)
    if run:
        return f"runner-{run}-{attempt}-{tail}"
    return f"runner-local-{int(wiring.clock.time())}-{tail}"


def _scope(repo: str | None, org: str | None, wiring: Wiring) -> Scope:
    from runner.gh_runner.github import Scope

    if repo and org:
        _usage("give --repo or --org, not both")
    if org:
        return Scope.org(org)
    name = repo or wiring.env.get("GITHUB_REPOSITORY", "")
    if not name:
        _usage(
            "which repository should the runners register on? none was named",
            "give --repo OWNER/NAME (in Actions, $GITHUB_REPOSITORY names it)",
        )
    return Scope.repo(name)


def _stop_scope(repo: str | None, org: str | None, wiring: Wiring) -> Scope | None:
    """Where stop may remove registrations: --org, --repo, else $GITHUB_REPOSITORY; None
    when none is known (the registrations are then left to GitHub, which drops unused ones)."""
    from runner.gh_runner.github import Scope

    if org:
        return Scope.org(org)
    name = repo or wiring.env.get("GITHUB_REPOSITORY", "")
    return Scope.repo(name) if name else None


def _runner_token(wiring: Wiring) -> str:
    from runner.gh_runner.errors import TOKEN_HINT

    token = wiring.env.get(TOKEN_ENV, "").strip()
    if not token:
        _usage(f"{TOKEN_ENV} is not set: the token that registers runners", TOKEN_HINT)
    return token


def _package(url: str | None, sha256: str | None, user: str) -> RunnerPackage:
    """The pinned release and its checksum, unless a URL is given (its checksum with it)."""
    from runner.gh_runner.remote import RunnerPackage

    if url is None:
        return (
            RunnerPackage(user=user) if sha256 is None else RunnerPackage(sha256=sha256, user=user)
        )
    return RunnerPackage(url=url, sha256=sha256 or "", user=user)


@contextmanager
def _cancel_on_signals() -> Iterator[threading.Event]:
    """SIGINT, SIGTERM and SIGHUP set the event start watches: it gives back what it rented
    and exits 130, within the runner's 7.5 s from SIGINT to SIGTERM."""
    cancel = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        cancel.set()

    if threading.current_thread() is not threading.main_thread():
        yield cancel  # signals reach only the main thread (tests call from others)
        return
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in caught}
    try:
        yield cancel
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _usage(message: str, hint: str = "") -> NoReturn:
    typer.echo(shaped(message, hint), err=True)
    raise typer.Exit(2)
