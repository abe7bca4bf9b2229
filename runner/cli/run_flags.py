"""What `clore-run run` does with its flags once Typer has parsed them (runner.cli.run)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from runner.cli.boundary import Echo
from runner.cli.validate import show_warnings
from runner.errors import UsageError


class BackendName(str, Enum):
    local = "local"
    ssh = "ssh"
    clore = "clore"


@dataclass(frozen=True)
class RunFlags:
    """`clore-run run`'s arguments, as the user gave them (None: not given)."""

    pipeline: Path
    backend: BackendName | None = None
    out: Path = Path("clore-run-results")
    concurrency: int | None = None
    budget: float | None = None
    job: list[str] = field(default_factory=list)
    dry_run: bool = False
    baseline: Path | None = None
    host: list[str] = field(default_factory=list)
    identity: Path | None = None
    ledger: str | None = None
    pool: str | None = None
    coordinator: str | None = None


def run_with(flags: RunFlags, echo: Echo) -> int:
    """Load, check the flags, run on the chosen backend: the exit code."""
    from runner.run_command import RunOptions, execute, select_jobs
    from runner.spec.limits import MAX_CONCURRENCY
    from runner.spec.loader import load_pipeline

    loaded = load_pipeline(flags.pipeline)
    show_warnings(loaded, echo)
    if flags.dry_run:
        from runner.plan import build_plan, render_plan

        echo(render_plan(build_plan(select_jobs(loaded, flags.job))))
        return 0
    chosen = flags.backend or (BackendName.clore if os.environ.get("CLORE_API_KEY") else None)
    if chosen is None:
        echo("clore-run: no CLORE_API_KEY set: running locally (--backend local)", err=True)
        chosen = BackendName.local
    if flags.pool is not None and chosen is not BackendName.clore:
        raise UsageError(
            f"--pool {flags.pool}: pools hold rented servers", hint="use --backend clore"
        )
    budget, concurrency = flags.budget, flags.concurrency
    options = RunOptions(
        out_dir=flags.out,
        concurrency=concurrency,
        budget_usd=budget,
        jobs=flags.job,
        baseline=_read_baseline(flags.baseline),
    )
    if budget is not None:
        if not budget > 0 or budget == float("inf"):  # as the file's `budget:` must be
            raise UsageError(
                f"--budget {budget:g}: must be a positive amount of USD for the whole run",
                "for example --budget 2.50",
            )
        loaded = dataclasses.replace(loaded, budget_usd=budget)
    if concurrency is not None:  # the clore backend caps the servers it holds at this
        if not 1 <= concurrency <= MAX_CONCURRENCY:  # as the file's `concurrency:` must be
            raise UsageError(
                f"--concurrency {concurrency}: must be from 1 to {MAX_CONCURRENCY} servers "
                "or jobs at once",
                "for example --concurrency 4",
            )
        loaded = dataclasses.replace(loaded, concurrency=concurrency)
    if chosen is BackendName.clore:
        from runner.backends.clore.factory import clore_backend
        from runner.ledger import DEFAULT_PATH as DEFAULT_LEDGER
        from runner.stores.target import coordinator_from, ledger_target

        shared = coordinator_from(flags.coordinator)
        where = ledger_target(flags.ledger, shared, DEFAULT_LEDGER)
        made = clore_backend(loaded, where, options.run_id, pool=flags.pool, coordinator=shared)
        _, code = execute(loaded, made, options)
    elif chosen is BackendName.ssh:
        from runner.backends.ssh.backend import SshBackend

        hosts = list(flags.host or loaded.hosts)
        if not hosts:
            raise UsageError(
                "--backend ssh needs hosts", "pass --host root@HOST[:PORT] or set `hosts:`"
            )
        _, code = execute(loaded, SshBackend.from_flags(hosts, flags.identity), options)
    else:
        from runner.backends.local import LocalBackend

        _, code = execute(loaded, LocalBackend(), options)
    return code


def _read_baseline(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from runner.report import load_summary

    try:
        return load_summary(path)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--baseline {path}: not JSON ({exc.msg.lower()} at line {exc.lineno}, "
            f"column {exc.colno})",
            "pass the summary.json of an earlier run",
        ) from None
    except UnicodeDecodeError:
        raise UsageError(
            f"--baseline {path}: not JSON (not UTF-8 text)",
            "pass the summary.json of an earlier run",
        ) from None
    except ValueError as exc:  # JSON, but not an object
        what = str(exc).removeprefix(f"{path}: ")
        raise UsageError(
            f"--baseline {path}: {what}", "pass the summary.json of an earlier run"
        ) from None
    except OSError as exc:
        raise UsageError(f"--baseline {path}: cannot read it ({exc.strerror})") from None
