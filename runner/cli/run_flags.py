"""What `clore-run run` does with its flags once Typer has parsed them (runner.cli.run)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.backends.registry import (
    DEFAULT_BACKEND,
    backend_spec,
    default_backend,
    renting_backends,
)
from runner.backends.spec import BackendSpec, Setup
from runner.cli.boundary import Echo
from runner.cli.validate import show_warnings
from runner.errors import UsageError


@dataclass(frozen=True)
class RunFlags:
    """`clore-run run`'s arguments, as the user gave them (None: not given)."""

    pipeline: Path
    backend: str | None = None  # a name in runner.backends.registry
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
    from runner.engine.run_command import RunOptions, execute, select_jobs
    from runner.spec.limits import MAX_CONCURRENCY
    from runner.spec.loader import load_pipeline

    named = backend_spec(flags.backend) if flags.backend is not None else None
    loaded = load_pipeline(flags.pipeline)
    show_warnings(loaded, echo)
    if flags.dry_run:
        from runner.plan import build_plan, render_plan

        echo(render_plan(build_plan(select_jobs(loaded, flags.job))))
        return 0
    spec = named or _default(echo)
    if flags.pool is not None and not spec.rents:
        raise UsageError(
            f"--pool {flags.pool}: pools hold rented servers",
            hint="use " + " or ".join(f"--backend {n}" for n in renting_backends()),
        )
    budget, concurrency = flags.budget, flags.concurrency
    options = RunOptions(out_dir=flags.out, jobs=flags.job, baseline=_read_baseline(flags.baseline))
    if budget is not None:  # a positive, finite amount: runner.usd parsed the flag
        loaded = dataclasses.replace(loaded, budget_usd=budget)
    # The pipeline carries both from here on: the run, its console and the backend read them.
    if concurrency is not None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:  # as the file's `concurrency:` must be
            raise UsageError(
                f"--concurrency {concurrency}: must be from 1 to {MAX_CONCURRENCY} servers "
                "or jobs at once",
                "for example --concurrency 4",
            )
        loaded = dataclasses.replace(loaded, concurrency=concurrency)
    setup = Setup(
        loaded,
        options.run_id,
        hosts=tuple(flags.host),
        identity=flags.identity,
        ledger=flags.ledger,
        pool=flags.pool,
        coordinator=flags.coordinator,
    )
    backend = spec.build(setup)
    options.exit_hint = spec.exit_hint
    if spec.waits is not None:  # said on stderr until the console takes them over
        options.waits = spec.waits(backend, lambda line: echo(line, err=True))
    _, code = execute(loaded, backend, options)
    return code


def _default(echo: Echo) -> BackendSpec:
    """The backend without --backend: clore with a key, else local, said so."""
    chosen = default_backend()
    if chosen.name != DEFAULT_BACKEND:
        echo(
            f"clore-run: no CLORE_API_KEY set: running locally (--backend {chosen.name})", err=True
        )
    return chosen


def _read_baseline(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from runner.report import read_json

    try:
        return read_json(path)  # compared when the reports are written; unusable: a warning
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
