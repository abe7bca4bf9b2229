"""`clore-run submit`: queue a pipeline on a server; with `--wait`, follow its jobs to the end
and write the reports `run` writes, with `run`'s exit codes (0, 1, 3; 130 on Ctrl-C, which
cancels the submission's jobs). In GitHub Actions the step outputs and summary follow, as for
`run`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.clock import SYSTEM_CLOCK
from runner.engine.run_command import (
    EXIT_CODES,
    allowed_failures,
    check_out_folder,
    output_folder,
    stop_on_signals,
)
from runner.errors import UsageError
from runner.figures import money
from runner.outcome import exit_line, run_line
from runner.report import github_actions
from runner.serve.ci_trust import actions_domain
from runner.serve.client import Client, ClientError, key_path
from runner.serve.wait import Watch, submission_of, write_submission_reports
from runner.spec.loader import parse_pipeline
from runner.spec.trust import RULE, is_name
from runner.untrusted import console_line

DEFAULT_OUT = Path("clore-run-results")
EXIT_INTERRUPTED = 130


class Echo(Protocol):
    def __call__(self, message: str, *, err: bool = ...) -> None: ...


@dataclass(frozen=True)
class Asked:
    """The command's arguments."""

    pipeline: Path
    server: str
    after: Sequence[str]
    trust: str | None
    wait: bool
    out: Path | None
    logs: bool
    poll_s: float = 1.0


class _Interrupts:
    """A signal's reason, passed on to the watch once there is one: a Ctrl-C while the
    submission is being sent still cancels its jobs once their ids are known."""

    def __init__(self) -> None:
        self.reason = ""
        self.watch: Watch | None = None

    def __call__(self, reason: str) -> None:
        self.reason = self.reason or reason
        if self.watch is not None:
            self.watch.interrupt(reason)

    def follow(self, watch: Watch) -> None:
        self.watch = watch
        if self.reason:
            watch.interrupt(self.reason)


def submit_pipeline(asked: Asked, echo: Echo) -> int:
    if not asked.wait and (asked.out is not None or asked.logs):
        raise UsageError(
            "--out and --logs follow a submission to its end",
            "add --wait (without it, submit prints the job ids and returns)",
        )
    trust = _trust(asked.trust, echo)
    text = _read(asked.pipeline)
    if not asked.wait:
        for job_id in _send(asked, text, trust, echo):
            echo(job_id)
        return 0
    # The server's own loader, here first: a bad file is refused before anything is queued,
    # and the reports name the jobs as `run`'s do.
    pipeline = parse_pipeline(text, str(asked.pipeline), environ={})
    out_dir = asked.out or DEFAULT_OUT
    check_out_folder(out_dir, Path.cwd().resolve())
    client = Client(asked.server)
    interrupts = _Interrupts()
    with output_folder(out_dir), stop_on_signals(interrupts):
        started = SYSTEM_CLOCK.time()
        ids = _send(asked, text, trust, echo, client)
        submission = submission_of(pipeline, ids, started)
        echo(f"submitted s{submission.number} to {asked.server}: {len(ids)} job(s)")
        watch = Watch(client, submission, sys.stdout, logs=asked.logs, poll_s=asked.poll_s)
        interrupts.follow(watch)
        jobs = watch.run()
        interrupted = bool(watch.interrupted)
        record, paths = write_submission_reports(
            client, submission, jobs, out_dir, SYSTEM_CLOCK.time(), interrupted
        )
        github_actions.publish(paths)
    for warning in paths.warnings:
        echo(f"warning: {console_line(warning)}", err=True)
    # As `run` ends: the run's word and cost, and last why it exits (runner.outcome's words).
    allowed = allowed_failures(record)
    echo(
        f"{run_line(record.status, allowed)}: {money(record.total_cost_usd)}; reports in "
        f"{out_dir}/ (junit.xml, summary.json, summary.md)"
    )
    code = EXIT_INTERRUPTED if interrupted else EXIT_CODES[record.status]
    echo(exit_line(code, allowed) if code == 0 else f"clore-run: {exit_line(code)}")
    return code


def _trust(asked: str | None, echo: Echo) -> str | None:
    """The domain to send: as asked, or the one GitHub Actions gives (a fork's PR its own)."""
    if asked is not None and not is_name(asked):
        # Not echoed back: a value that is not a name may be markup or a control sequence.
        raise UsageError(f"--trust: {RULE}", "e.g. --trust team-ml; leave it out for `default`")
    trust, note = actions_domain(os.environ, asked)
    if note:
        echo(f"note: {note}", err=True)
    return trust


def _read(pipeline: Path) -> str:
    try:
        return pipeline.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{pipeline}: cannot read it ({exc})", "name a pipeline file") from None


def _send(
    asked: Asked, text: str, trust: str | None, echo: Echo, client: Client | None = None
) -> list[str]:
    try:
        reply = (client or Client(asked.server)).submit_pipeline(text, asked.after, trust)
    except ClientError as exc:
        located = _located(asked.pipeline, exc)
        raise (UsageError(located) if located else exc) from None
    for warning in reply.get("warnings", []):
        echo(f"warning: {warning}", err=True)
    return list(reply["ids"])


def _located(pipeline: Path, exc: ClientError) -> str:
    """Located problems from the server, named by the local file ("": the reply has none)."""
    body = exc.body
    items = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return ""
    lines = []
    for item in items:
        path = key_path(item.get("loc", []))
        where = f"{pipeline}:{item['line']}:{item['column']}" if item.get("line") else str(pipeline)
        hint = f" ({item['hint']})" if item.get("hint") else ""
        lines.append(f"{where}: {path + ': ' if path else ''}{item.get('msg', '')}{hint}")
    return "\n".join(lines)


__all__ = ["Asked", "submit_pipeline"]
