"""`clore-run serve`, `submit`, `status` and `cancel`, added to the Typer app by `register(app)`.

Exit codes of the client commands: 0 ok, 2 usage or a 4xx reply, 3 server unreachable or 5xx.
The server's modules (FastAPI, uvicorn) are imported only by `serve`, so the client commands
work without the `serve` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from runner.cli.options import (
    BACKEND_NAMES,
    CoordinatorOption,
    IdentityOption,
    LedgerOption,
    PoolOption,
    SshHostOption,
    backend_help,
    usd_option,
)
from runner.errors import UsageError
from runner.outcome import outcome
from runner.serve import DEFAULT_SERVER
from runner.stores.target import PASSWORD_SOURCES

DEFAULT_DB = ".clore-run/serve.db"
Server = Annotated[
    str, typer.Option(envvar="CLORE_RUN_SERVER", help="The queue server's URL.", metavar="URL")
]


def register(app: typer.Typer) -> None:
    """Add the queue's server and client commands to `app`."""
    app.command("serve")(serve)
    app.command("submit")(submit)
    app.command("status")(status)
    app.command("cancel")(cancel)


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    db: Annotated[
        str | None,
        typer.Option(
            help="The queue database: a SQLite file (one server), or a postgresql:// URL that "
            f"N servers share (default: the coordinator, else {DEFAULT_DB}). A password is "
            f"refused here (ps shows it): give it by {PASSWORD_SOURCES}.",
            metavar="FILE|URL",
        ),
    ] = None,
    backend: Annotated[
        str, typer.Option(help=backend_help("local"), metavar=BACKEND_NAMES)
    ] = "local",
    concurrency: Annotated[
        int, typer.Option(min=1, help="Jobs running at once, in all (on this instance).")
    ] = 3,
    daily_spend_limit: Annotated[
        float | None,
        usd_option(
            help="USD per UTC day; no job starts once it is spent (a SQLite --db: N instances "
            "on PostgreSQL share a per-day --pool instead).",
        ),
    ] = None,
    ssh_host: SshHostOption = None,
    identity: IdentityOption = None,
    ledger: LedgerOption = None,
    pool: PoolOption = None,
    coordinator: CoordinatorOption = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Logs and artifacts (default: beside a SQLite --db, else .clore-run/serve.d)."
        ),
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="PostgreSQL --db: seconds an instance's lease lasts without a heartbeat; "
            "a dead instance's jobs are taken over after it.",
        ),
    ] = 30.0,
    keep_warm: Annotated[
        float,
        typer.Option(
            help="Keep a rented server up to MINUTES after its last job for the next job that "
            "fits it, in the same trust domain (0: give it back once no job wants it).",
            metavar="MINUTES",
        ),
    ] = 0.0,
    warm: Annotated[
        list[str] | None,
        typer.Option(
            help="Keep at least N idle servers of a GPU type rented during a UTC schedule: "
            "GPU[:N][@[DAYS ]HH:MM-HH:MM UTC], e.g. '4090:1@Mon-Fri 08:00-20:00 UTC'. "
            "Repeatable.",
            metavar="GPU[:N][@SCHEDULE]",
        ),
    ] = None,
    idle_budget: Annotated[
        float | None,
        usd_option(
            help="USD a UTC day that idle warm servers may cost; past it they go back and "
            "none is rented for warmth.",
        ),
    ] = None,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            envvar="CLORE_RUN_TRUSTED_PROXIES",
            help="A reverse proxy's address whose X-Forwarded-For is believed (repeatable). "
            "Default none: a client's own address is what login throttling counts.",
            metavar="ADDRESS",
        ),
    ] = None,
    api_docs: Annotated[
        bool,
        typer.Option(
            "--api-docs",
            help="Serve /docs and /redoc (Swagger UI and ReDoc load scripts from a CDN: off "
            "by default). /openapi.json is always served, behind the token.",
        ),
    ] = False,
    cancel_unproven: Annotated[
        bool,
        typer.Option(
            "--cancel-unproven",
            help="At a restart, also cancel a dead instance's orders that may be its own but "
            "cannot be proven (without it they are named in the log and left running). Only "
            "for an API key that no other run, machine or person uses: an order of theirs "
            "would be cancelled too.",
        ),
    ] = False,
) -> None:
    """Run the persistent job queue and its REST API (needs CLORE_RUN_TOKEN)."""
    from runner.backends.registry import backend_spec, renting_backends
    from runner.serve.backends import BackendChoice
    from runner.serve.server_cmd import ServeOptions, run_server
    from runner.serve.warm_flags import warm_policy
    from runner.stores.target import (
        argument_url,
        coordinator_from,
        is_postgres_url,
        ledger_target,
    )

    spec = backend_spec(backend)
    warmth = warm_policy(keep_warm, warm or (), idle_budget)
    shared = coordinator_from(coordinator)
    if pool is not None and (not spec.rents or shared is None):
        renting = " or ".join(f"--backend {n}" for n in renting_backends())
        raise UsageError(
            f"--pool {pool}: pools hold rented servers on the coordinator",
            hint=f"use {renting} and --coordinator URL",
        )
    where: Path | str = Path(db) if db else Path(DEFAULT_DB)
    if db and is_postgres_url(db):
        where = argument_url(db, "--db")
    elif not db and shared is not None:
        where = shared
    if pool is not None and isinstance(where, str) and where != shared:
        # N instances claim each job with its pool slot in one transaction: one database.
        raise UsageError(
            f"--pool {pool}: the queue (--db) and the pool (--coordinator) must be one database",
            hint="leave --db out (the queue goes on the coordinator) or pass the same URL",
        )
    if daily_spend_limit is not None and isinstance(where, str):
        raise _per_instance_limit(daily_spend_limit, backend, spec.rents, pool)
    rentals = ledger_target(ledger, shared, Path(".clore-run/ledger.db"))
    choice = BackendChoice(
        spec.name,
        tuple(ssh_host or ()),
        identity,
        rentals,
        pool=pool,
        coordinator=shared,
        cancel_unproven=cancel_unproven,
    )
    run_server(
        ServeOptions(
            host,
            port,
            where,
            choice,
            concurrency,
            daily_spend_limit,
            data_dir,
            lease_ttl,
            warmth,
            trusted_proxies=_proxies(trusted_proxy or []),
            api_docs=api_docs,
        ),
    )


def _proxies(given: list[str]) -> tuple[str, ...]:
    """The addresses given (comma-separated too, as the environment variable has them),
    each an IP address or network: anything else is a usage error naming it."""
    import ipaddress  # only `serve` with --trusted-proxy parses addresses

    out: list[str] = []
    for item in (part.strip() for text in given for part in text.split(",")):
        if not item:
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise UsageError(
                f"--trusted-proxy {item!r}: not an IP address or network",
                hint="e.g. --trusted-proxy 10.0.0.5 (the proxy in front of serve)",
            ) from None
        out.append(item)
    return tuple(out)


def _per_instance_limit(
    limit_usd: float, backend: str, rents: bool, pool: str | None
) -> UsageError:
    """A daily limit on a shared queue would be each instance's own: every one reserves its
    rentals' worst cases against the whole limit, so N instances could commit N times it. The
    day's budget that N instances share is a per-day pool's, reserved under the pool's lock."""
    what = (
        f"--daily-spend-limit {limit_usd:g}: on a shared (PostgreSQL) queue each instance "
        f"would hold it for itself, so N instances could spend N times it in a day"
    )
    if not rents:
        return UsageError(what, hint=f"{backend} jobs rent nothing: leave it out")
    if pool is not None:
        return UsageError(
            what,
            hint=f"leave it out: pool {pool}'s budget is what every instance shares (to make "
            f"it a day's: clore-run pool set {pool} --budget {limit_usd:g} --per-day)",
        )
    return UsageError(
        what,
        hint=f"share a per-day budget pool instead: clore-run pool create NAME --budget "
        f"{limit_usd:g} --per-day --max-servers N --coordinator URL, then start every instance "
        "with --pool NAME and --coordinator set to the queue's URL, without --daily-spend-limit",
    )


def submit(
    pipeline: Annotated[Path, typer.Argument(help="The pipeline file.")],
    server: Server = DEFAULT_SERVER,
    after: Annotated[
        list[str] | None, typer.Option("--after", help="Server job ids its root jobs need.")
    ] = None,
    trust: Annotated[
        str | None,
        typer.Option(
            help="The submission's trust domain: a server is reused only within one (default: "
            "default; in GitHub Actions repo-<owner>.<name>, and a fork's PR its own).",
            metavar="NAME",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for every job; exit as `run` does (0, 1, 3, 130).")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="With --wait: write run's reports here (default clore-run-results)."),
    ] = None,
    logs: Annotated[
        bool, typer.Option("--logs", help="With --wait: show each job's output.")
    ] = False,
    poll: Annotated[float, typer.Option(hidden=True, min=0.001)] = 1.0,
) -> int:
    """Queue a pipeline on a server; print the job ids (--wait: follow them to the end)."""
    from runner.cli.submit_wait import Asked, submit_pipeline

    asked = Asked(pipeline, server, after or [], trust, wait, out, logs, poll)
    return submit_pipeline(asked, typer.echo)


def status(
    job: Annotated[
        str | None, typer.Argument(help="A job id (default: the server's stats).")
    ] = None,
    server: Server = DEFAULT_SERVER,
    as_json: Annotated[bool, typer.Option("--json", help="Print the reply as JSON.")] = False,
) -> None:
    """Show a job (status, attempts, cost), or the server's counts and spend."""
    from runner.serve.client import Client

    client = Client(server)
    reply = client.job(job) if job else client.stats()
    if as_json:
        typer.echo(json.dumps(reply, indent=2))
    else:
        typer.echo(_job_text(reply) if job else _stats_text(reply))


def cancel(
    job: Annotated[str, typer.Argument(help="The job id.")],
    server: Server = DEFAULT_SERVER,
) -> None:
    """Cancel a job: queued ones at once, running ones are killed."""
    from runner.serve.client import Client

    reply = Client(server).cancel(job)
    typer.echo(f"{reply['id']}: {status_word(reply)}")


def status_word(job: dict[str, Any]) -> str:
    """`failed (allowed)` for a failure `continue-on-error` lets pass, as `run` says it."""
    allowed = bool(job.get("allowed_failure"))
    return outcome(job["status"], allowed=allowed, flaky=job.get("attempts", 0) > 1).words


def _job_text(job: dict[str, Any]) -> str:
    lines = [
        f"{job['id']}: {status_word(job)}" + (f" ({job['reason']})" if job.get("reason") else ""),
        f"  name: {job['name']}  priority: {job['priority']}  cost: ${job['cost_usd']:.4f}"
        + (f"  trust: {job['trust']}" if job.get("trust") else ""),
    ]
    if job.get("waiting_for"):
        lines.append(f"  waiting for: {job['waiting_for']}")
    for a in job.get("attempt_list", []):
        verdict = str(a["failure"] or ("passed" if a["finished_at"] else "running"))
        verdict = verdict.replace("_", " ")  # `test failure`, not the enum's `test_failure`
        detail = f": {a['message']}" if a.get("message") else ""
        lines.append(f"  attempt {a['number']} on {a['server'] or '-'}: {verdict}{detail}")
    return "\n".join(lines)


def _stats_text(stats: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in stats["counts"].items() if n)
    limit = stats.get("daily_spend_limit_usd")
    return "\n".join(
        [
            f"jobs: {counts or 'none'}",
            f"running: {stats['running']}/{stats['capacity']}  servers held: "
            f"{stats['servers_held']}",
            f"spend: ${stats['spend_usd_today']:.2f} today"
            + (f" of ${limit:.2f}" if limit is not None else "")
            + f", ${stats['spend_usd_total']:.2f} in all",
            *_idle_text(stats),
        ]
    )


def _idle_text(stats: dict[str, Any]) -> list[str]:
    """Idle money, its own figure: today's, against --idle-budget, by GPU type."""
    budget = stats.get("idle_budget_usd")
    rows = stats.get("idle_by_day") or []
    if budget is None and not rows:
        return []
    today = max((r["day"] for r in rows), default="")
    by_gpu = ", ".join(f"{r['gpu'] or 'server'} ${r['usd']:.2f}" for r in rows if r["day"] == today)
    of = f" of ${budget:.2f} idle budget" if budget is not None else ""
    return [
        f"idle: ${stats.get('idle_usd_today', 0.0):.2f} today{of}"
        + (f" ({by_gpu})" if by_gpu else "")
        + " - servers rented and running no job, in no job's cost"
    ]
