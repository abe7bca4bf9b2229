"""`clore-run run` once its flags are read (runner.cli.run_flags): select the jobs, prepare the
output folder, run on the backend, report. No Typer here: tests and embedders call `execute`."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from runner.backends.base import Backend, GivenBack, RentingBackend
from runner.backends.spec import Waits
from runner.clock import SYSTEM_CLOCK, Clock
from runner.collector import startup_over
from runner.core import graph
from runner.core.model import WORKSPACE_ALL, Job, JobStatus, Pipeline, RunRecord, RunStatus
from runner.core.retry import backoff_s
from runner.engine.console import Console
from runner.engine.pipeline_run import PipelineRun, RunSettings, new_run_id
from runner.errors import UsageError
from runner.figures import money
from runner.file_lock import hold_lock
from runner.outcome import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_PASSED,
    GIVEN_BACK,
    exit_hint,
    exit_line,
    outcome,
    run_exit_code,
)
from runner.report import REPORT_FILES, ReportPaths, github_actions, write_reports
from runner.spec.diagnostics import Diagnostic, SpecError, did_you_mean
from runner.workspace import Workspace, workspace_files

_OUTPUTS = ("logs", "artifacts", *REPORT_FILES)
LOCK_NAME = ".clore-run.lock"  # in every output folder clore-run wrote: it is ours
EXIT_CODES = {status: run_exit_code(status) for status in RunStatus}


@dataclass
class RunOptions:
    """The `run` command's options (the CLI's flags, or a caller's). The pipeline carries its
    concurrency and budget, --concurrency and --budget applied (runner.cli.run_flags)."""

    out_dir: Path = Path("clore-run-results")
    jobs: Sequence[str] = ()
    workspace_root: Path | None = None  # default: the current directory
    baseline: dict[str, Any] | None = None
    backoff: Callable[[int], float] = backoff_s
    run_id: str = field(default_factory=new_run_id)
    clock: Clock = SYSTEM_CLOCK  # the run's timers and times (tests: their backend's clock)
    # A renting backend's waits on its API (runner.backends.clore.waits): said on the console
    # once it exists, and what was given up kept as the reports' warnings.
    waits: Waits | None = None
    # What to do after exit 3, from the errored jobs' reasons: the backend's (its spec's), or
    # None for runner.outcome's.
    exit_hint: Callable[[Sequence[str]], str] | None = None


def select_jobs(pipeline: Pipeline, names: Sequence[str]) -> Pipeline:
    """Keep the named jobs (ids or job keys) and everything they need."""
    if not names:
        return pipeline
    ids = {j.id for j in pipeline.jobs}
    groups: dict[str, list[str]] = {}
    for j in pipeline.jobs:
        groups.setdefault(j.group or j.id, []).append(j.id)
    wanted: list[str] = []
    for name in names:
        if name in ids:
            wanted.append(name)
        elif name in groups:
            wanted.extend(groups[name])
        else:
            hint = did_you_mean(name, [*groups, *ids]) or "see `clore-run plan`"
            raise UsageError(f"--job: unknown job '{name}'", hint)
    keep = graph.ancestors({j.id: j.needs for j in pipeline.jobs}, wanted)
    jobs = tuple(
        dataclasses.replace(j, index=i)
        for i, j in enumerate(j for j in pipeline.jobs if j.id in keep)
    )
    return dataclasses.replace(pipeline, jobs=jobs)


def check_out_folder(out_dir: Path, workspace_root: Path) -> None:
    """Refuse the filesystem root, and a folder holding the workspace (`--out .` in the
    repository) unless it is empty or clore-run's own: the run writes logs/, artifacts/ and
    reports there, and deletes the logs/ and artifacts/ it finds in a folder of its own."""
    out = out_dir.resolve()
    if out.parent == out:
        raise UsageError(
            f"--out {out_dir}: the root of the filesystem", "name a folder for the results"
        )
    if not workspace_root.is_relative_to(out) or (out / LOCK_NAME).exists():
        return
    try:
        empty = not any(out.iterdir())
    except OSError:
        return  # missing or unreadable: output_folder says why, if it matters
    if not empty:
        raise UsageError(
            f"--out {out_dir}: it holds the workspace ({workspace_root}), and is not empty",
            "name a folder inside it or elsewhere, such as --out clore-run-results",
        )


@contextmanager
def output_folder(out_dir: Path) -> Iterator[None]:
    """Make `out_dir` ours for the run: writable, locked against a second run, no stale files.

    Only a folder clore-run wrote before (it holds our lock file) is cleaned; a folder of the
    user's that already has a `logs/` or a `junit.xml` is refused, never emptied (`--out .`).
    """
    lock_path = out_dir / LOCK_NAME
    if out_dir.exists() and not out_dir.is_dir():  # said in words, not as `File exists`
        raise UsageError(
            f"--out {out_dir}: that is a file, and the reports need a folder",
            "name a folder (it is made if missing), such as --out clore-run-results",
        )
    foreign = [n for n in _OUTPUTS if (out_dir / n).exists()] if not lock_path.exists() else []
    if foreign:
        raise UsageError(
            f"--out {out_dir}: it already holds {', '.join(foreign)}, not written by clore-run",
            "choose an empty folder or a previous clore-run output folder",
        )
    lock = hold_lock(
        lock_path,
        lambda exc: UsageError(
            f"--out {out_dir}: cannot write there: {(exc.strerror or str(exc)).lower()}",
            "choose a writable folder",
        ),
        UsageError(f"--out {out_dir}: another clore-run is writing there", "use another --out"),
    )
    try:
        for stale in ("logs", "artifacts"):
            shutil.rmtree(out_dir / stale, ignore_errors=True)
        yield
    finally:
        lock.close()


@contextmanager
def stop_on_signals(cancel: Callable[[str], None]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP cancel the run (cleanly, reports included) instead of
    killing it."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        cancel(f"interrupted by {signal.Signals(signum).name}")

    # SIGHUP too: closing the terminal must give rented servers back, not abandon them.
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in caught}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def execute(
    pipeline: Pipeline,
    backend: Backend,
    options: RunOptions,
    stream: TextIO | None = None,
) -> tuple[RunRecord, int]:
    """Run `pipeline` and write the reports; return the record and the exit code."""
    pipeline = select_jobs(pipeline, options.jobs)
    wanted = cap = pipeline.concurrency
    backend_cap = backend.capacity()
    if backend_cap is not None:
        cap = min(cap, backend_cap)
    root = (options.workspace_root or Path.cwd()).resolve()
    check_out_folder(options.out_dir, root)
    workspace = _workspace(pipeline, root, options.out_dir.resolve())
    in_actions = github_actions.is_active()
    console = Console(
        stream or sys.stdout,
        jobs=pipeline.jobs,
        budget_usd=pipeline.budget_usd,
        name=pipeline.name,
        grouped_logs=options.out_dir / "logs" if in_actions else None,
    )
    if cap < wanted and len(pipeline.jobs) > cap:  # else it looks like a scheduling bug
        console.notice(
            f"concurrency {wanted}, but the {backend.name} backend has {cap} place"
            f"{'s' if cap != 1 else ''}: at most {cap} job{'s' if cap != 1 else ''} at once"
        )
    if workspace.withheld:
        console.notice(_withheld_note(workspace.withheld))
    if options.waits is not None:
        options.waits.say = console.notice
    with output_folder(options.out_dir):
        pipeline_run = PipelineRun(
            pipeline,
            backend,
            RunSettings(
                options.out_dir,
                cap,
                root,
                workspace.files,
                run_id=options.run_id,
                backoff=options.backoff,
                # Rent-ahead plans with how long each job took in the baseline run, if any.
                durations_s=_baseline_durations(options.baseline),
            ),
            console,
            options.clock,
        )
        startup_over()  # what was made so far lives for the run
        given_back: list[str] = []
        with stop_on_signals(pipeline_run.cancel):
            try:
                record = pipeline_run.run(
                    lambda early: _reports_before_give_back(console, options, early)
                )
                given_back = _say_given_back(console, backend)
            finally:
                console.close()
        left = pipeline_run.driver.give_back_warnings  # said on screen when they happened
        unproven = _unproven(backend)
        notes = (*_notes(options), *left, *(f"{what}. {hint}" for what, hint in unproven))
        # What was rented and went back is in the reports too: after a Ctrl-C the jobs show no
        # server and $0.00 beside a run total that paid for one.
        notes += tuple(given_back)
        code = _exit_code(record, bool(unproven), pipeline_run.interrupted)
        paths = write_reports(
            options.out_dir, record, options.baseline, notes=notes, exit_code=code
        )
        github_actions.publish(paths)
        if github_actions.is_active():
            github_actions.annotate_run_errors([f"{what}. {hint}" for what, hint in unproven])
    # Each cause said once: a job's line already said the API could not be reached, the
    # unproven orders are said last.
    said = [r.reason for r in record.results if r.reason] + [w for w, _ in unproven]
    said += given_back  # on screen already, as the run ended
    for warning in paths.warnings:
        if warning not in left and not any(warning.startswith(w) for w in said):
            console.notice(f"warning: {warning}")
    _final_report(console, paths, options.out_dir)
    for what, hint in unproven:  # where a person looks: it bills until cancelled
        console.notice(what)
        console.hint(hint)
    # Last, why the run exits, in the words summary.md has; the unproven orders' own hints
    # say what to do about them.
    allowed = allowed_failures(record)
    hint = "" if unproven else _exit_hint(options, record, code)
    console.run_exit(code, exit_line(code, allowed), hint)
    return record, code


def _exit_hint(options: RunOptions, record: RunRecord, code: int) -> str:
    """What to do after the run: for exit 3 the backend's hint for its errored jobs' causes."""
    if code == EXIT_INFRA and options.exit_hint is not None:
        errored = [r.reason for r in record.results if r.status is JobStatus.ERROR]
        return options.exit_hint(errored)
    return exit_hint(code, f"{options.out_dir}{os.sep}")


def allowed_failures(record: RunRecord) -> int:
    """How many of the run's jobs failed as continue-on-error allows (runner.outcome's rule)."""
    allows = {job.id: job.continue_on_error for job in record.pipeline.jobs}
    said = (outcome(r.status, allowed=allows.get(r.job_id, False)) for r in record.results)
    return sum(1 for o in said if o.allowed)


def _exit_code(record: RunRecord, unproven: bool, interrupted: bool) -> int:
    """What the run exits with: its status's code, but never 0 or 1 with an order left that
    may be ours, and 130 after a signal, even one after the jobs ended (it cut the give-back
    short: what it left unconfirmed is `clore-run cleanup`'s)."""
    if interrupted:
        return EXIT_INTERRUPTED
    code = EXIT_CODES[record.status]
    return EXIT_INFRA if unproven and code in (EXIT_PASSED, EXIT_FAILED) else code


def _unproven(backend: Backend) -> tuple[tuple[str, str], ...]:
    """A renting backend's orders that may be ours and were not proven: (what, hint) each."""
    if not isinstance(backend, RentingBackend):
        return ()
    return tuple((order.what, order.hint) for order in backend.unproven_orders())


def _say_given_back(console: Console, backend: Backend) -> list[str]:
    """One line naming the servers the run rented and gave back, with what each cost as
    billed: at the end of every run that rented, Ctrl-C included (a person stopping a run
    wants to see it), and returned for the reports. A server not confirmed gone is said by the
    backend itself, with `clore-run cleanup`."""
    given = backend.given_back() if isinstance(backend, RentingBackend) else ()
    if not given:
        return []
    servers = ", ".join(_server_cost(order) for order in given[:10])
    more = f" and {len(given) - 10} more" if len(given) > 10 else ""
    line = f"{GIVEN_BACK}{servers}{more}"
    console.notice(line)
    return [line]


def _server_cost(order: GivenBack) -> str:
    """`RTX 3090 #88028 ($0.0016)`: the GPUs and server rented, and what it cost as billed."""
    return order.label + (f" ({money(order.cost_usd)})" if order.cost_usd is not None else "")


def _baseline_durations(baseline: dict[str, Any] | None) -> dict[str, float]:
    """Seconds each job took in the baseline run. The predictor (and the market simulation it
    imports) loads only when there is a baseline: without one, a run does not need it."""
    if not baseline:
        return {}
    # the predictor and its market simulation: only with a baseline
    from runner.core.predict import past_durations

    return past_durations(baseline)


GIVING_BACK = (
    "written while the rented servers were still being given back; if this note stays, the"
    " run was killed then: `clore-run cleanup` gives back any left"
)


def _reports_before_give_back(console: Console, options: RunOptions, record: RunRecord) -> None:
    """The reports as they stand, before the slow part of the end; rewritten after it."""
    try:
        notes = (*_notes(options), GIVING_BACK)
        write_reports(options.out_dir, record, options.baseline, notes=notes)
    except Exception as exc:  # the give-back goes first; the final write reports a failure
        console.notice(f"warning: early reports not written: {exc}")


def _notes(options: RunOptions) -> tuple[str, ...]:
    """What the reports say beside the jobs: an API that could not be reached."""
    return options.waits.warnings if options.waits is not None else ()


def _workspace(pipeline: Pipeline, root: Path, out: Path) -> Workspace:
    """The files the jobs get; outside git, refused unless every job wanting them says `all`."""
    wanting = [j for j in pipeline.jobs if j.workspace]
    if not wanting:
        return Workspace((), in_git=True)
    workspace = workspace_files(root)
    files = workspace.files
    # A run's results are not the workspace: this run's (its logs are deleted below, before
    # any job copies them), nor an earlier run's with another --out (its lock file says so).
    ours = {f.rsplit("/", 1)[0] + "/" for f in files if f.rsplit("/", 1)[-1] == LOCK_NAME}
    if out != root and out.is_relative_to(root):
        ours.add(out.relative_to(root).as_posix() + "/")
    if ours:
        files = tuple(f for f in files if not f.startswith(tuple(ours)))
    workspace = dataclasses.replace(workspace, files=files)
    if workspace.in_git or not _beside_the_pipeline(pipeline, root, files):
        # An empty folder has nothing that could leak; nor has one holding only the pipeline
        # file (a first try: `mkdir p && cd p`, a pipeline.yml, `clore-run run`), which
        # travels as git would ship it.
        return workspace
    refused = {j.group or j.id: j for j in wanting if j.workspace != WORKSPACE_ALL}
    if refused:
        raise _untracked_refusal(root, len(files), list(refused.values()))
    return workspace


def _beside_the_pipeline(pipeline: Pipeline, root: Path, files: tuple[str, ...]) -> list[str]:
    """The files of a walk other than the pipeline file itself: what the refusal is about."""
    if not pipeline.source:
        return list(files)
    source = Path(pipeline.source).resolve()
    return [f for f in files if root / f != source]


def _untracked_refusal(root: Path, count: int, jobs: list[Job]) -> UsageError:
    message = (
        f"{root} is not in a git work tree, so nothing says which of its {count} file"
        f"{'s' if count != 1 else ''} may be copied to the job"
    )
    hint = (
        "set `workspace: all` to copy them all (.env*, .ssh/, .git/ and key files never travel),"
        " `workspace: false` for an empty folder, or run inside a git work tree (`git init`"
        " and `git add` the files the jobs need)"
    )
    located = [j for j in jobs if j.location is not None]
    where = located[0].location if located else None
    if where is None:
        return UsageError(message, hint)
    # Said once, at the first job it is about: the same words for each job would be the same
    # refusal many times over; the others are named.
    first = located[0]
    others = [j.group or j.id for j in jobs if j is not first]
    if others:
        message += (
            f" (and of jobs {', '.join(others)})"
            if len(others) > 1
            else (f" (and of job {others[0]})")
        )
    return SpecError(
        [
            Diagnostic(
                where.file,
                where.line,
                where.column,
                ("jobs", first.group or first.id, "workspace"),
                message,
                hint,
            )
        ]
    )


def _withheld_note(withheld: tuple[str, ...]) -> str:
    shown = ", ".join(withheld[:5])
    more = f" and {len(withheld) - 5} more" if len(withheld) > 5 else ""
    return f"workspace: never copied, as they look like secrets: {shown}{more}"


def _final_report(console: Console, paths: ReportPaths, out_dir: Path) -> None:
    try:
        summary = paths.read_summary()  # as written: not read back from the file
    except (OSError, ValueError) as exc:  # the reports are written; only the screen misses it
        console.notice(f"reports in {out_dir}{os.sep}; cannot show the summary: {exc}")
        return
    console.final_report(summary, out_dir)
