"""GitHub Actions integration: workflow commands on stdout and the environment files.

Active only when `GITHUB_ACTIONS=true`. Conventions (see the Actions docs and actions/toolkit):
- command data escapes `%`, CR and LF; property values also escape `:` and `,`;
- `GITHUB_OUTPUT` values use the `name<<DELIMITER` syntax with a random delimiter, so a value
  can never end the block early (the runner reads until a line equal to the delimiter);
- a step gets at most 10 error annotations; a step summary at most 1 MiB.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runner import redact
from runner.outcome import GIVEN_BACK, outcome
from runner.report.markdown import cut_markdown
from runner.report.text import tail_lines
from runner.untrusted import console_line

# Every command passes through mask_secrets and, on a bad pipeline, annotate_spec_error: what
# only the end of a run needs (uuid, the report readers) loads there, not on `validate`.
if TYPE_CHECKING:
    from runner.core.model import SpecWarning
    from runner.report import ReportPaths
    from runner.report.summary_model import Job as SummaryJob
    from runner.report.summary_model import Summary

STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes per step; over it GitHub drops the whole summary
_SUMMARY_MARGIN = 4096  # other writers in the same step, and GitHub's added newlines
ERROR_ANNOTATION_LIMIT = 10  # per step; more are silently dropped by the runner
_FAILED = ("failed", "timed_out", "error")
_LOG_GROUP_BYTES = 4 * 1024 * 1024  # a log group is for reading, the full log is in OUT/logs


def is_active(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("GITHUB_ACTIONS") == "true"


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str = "", **properties: str | int | None) -> str:
    """`::name k=v,...::message`, escaped; properties that are None are left out."""
    props = ",".join(
        f"{key}={escape_property(str(value))}"
        for key, value in properties.items()
        if value is not None and value != ""
    )
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def add_mask(value: str, out: TextIO | None = None) -> None:
    """Ask the runner to hide `value` in the log. Call before the value can be printed."""
    stream = out or sys.stdout
    parts = {value, *value.splitlines()}  # the runner masks per line of a multi-line value
    for part in sorted(p for p in parts if p.strip()):
        print(command("add-mask", part), file=stream, flush=True)


def mask_secrets(env: Mapping[str, str] | None = None, out: TextIO | None = None) -> None:
    """Mask the API key (and any other secret the run holds) when running in Actions."""
    env = os.environ if env is None else env
    if not is_active(env):
        return
    for secret in redact.secrets(env):
        add_mask(secret, out)


@contextmanager
def group(title: str, out: TextIO | None = None) -> Iterator[None]:
    """A collapsible block in the Actions log."""
    stream = out or sys.stdout
    print(command("group", title), file=stream, flush=True)
    try:
        yield
    finally:
        print(command("endgroup"), file=stream, flush=True)


def print_log_group(
    title: str, log: Path, out: TextIO | None = None, max_lines: int = 5000
) -> None:
    """A job's log in a group. Commands in it are switched off: the log comes from a rented
    machine, and a line like `::add-mask::` or `::error::` in it must not act on this runner."""

    stream = out or sys.stdout
    token = f"clore-run-{uuid.uuid4().hex}"
    with group(title, stream):
        print(f"::stop-commands::{token}", file=stream)
        _print_tail(log, stream, max_lines)
        print(f"::{token}::", file=stream, flush=True)


def _print_tail(log: Path, stream: TextIO, max_lines: int) -> None:
    if not log.is_file():
        print(f"(no log at {log})", file=stream)
        return

    # One line more than shown tells whether any was left out. (Comparing the file's size with
    # the lines' length said so for logs cut nowhere: the lines are decoded, their colour
    # codes and `\r` redraws taken out.)
    lines = tail_lines(log, max_lines + 1, max_bytes=_LOG_GROUP_BYTES)
    cut = len(lines) > max_lines or log.stat().st_size > _LOG_GROUP_BYTES
    lines = lines[-max_lines:] if max_lines > 0 else []
    if cut:
        print(f"... (earlier lines in {log})", file=stream)
    for line in lines:
        print(redact.text(line), file=stream)


def annotate_failures(
    summary: Summary,
    out: TextIO | None = None,
    workspace: str | None = None,
    limit: int = ERROR_ANNOTATION_LIMIT,
) -> int:
    """One `::error file=PIPELINE,line=N::` per failed job, at most `limit` in all.

    Past the limit the runner would drop annotations silently, so the last slot says how many
    more failed instead. Returns how many annotations were printed.
    """
    stream = out or sys.stdout
    failed = [j for j in summary.jobs if j.status in _FAILED]
    shown = failed if len(failed) <= limit else failed[: limit - 1]
    for job in shown:
        print(redact.text(_job_annotation(job, summary, workspace)), file=stream)
    if len(shown) < len(failed):
        rest = len(failed) - len(shown)
        source = _repo_path(summary.pipeline.source, workspace)
        msg = f"{rest} more failed jobs; see the job summary"
        print(command("error", msg, file=source, title="clore-run"), file=stream)
    stream.flush()
    return len(shown) + (len(shown) < len(failed))


def annotate_spec_error(
    exc: Exception, out: TextIO | None = None, env: Mapping[str, str] | None = None
) -> int:
    """In GitHub Actions, one `::error file=…,line=…,col=…::` per problem of an invalid
    pipeline file (as for failed jobs), at most the runner's limit. Returns how many."""
    diagnostics = getattr(exc, "diagnostics", ())
    if not diagnostics or not is_active(env):
        return 0
    stream = out or sys.stdout
    workspace = (os.environ if env is None else env).get("GITHUB_WORKSPACE")
    shown = diagnostics[:ERROR_ANNOTATION_LIMIT]
    for d in shown:
        message = str(d).removeprefix(f"{d.file}:{d.line}:{d.column}: ")  # said apart
        print(
            command(
                "error",
                message,
                file=_repo_path(d.file, workspace),
                line=d.line,
                col=d.column,
                title="clore-run: invalid pipeline",
            ),
            file=stream,
        )
    stream.flush()
    return len(shown)


def annotate_run_warnings(warnings: Sequence[str], out: TextIO | None = None) -> None:
    """One `::warning::` per warning of the run (a rental left unconfirmed, a bad JUnit
    file): the checks page shows them where nobody reads the log."""
    stream = out or sys.stdout
    # What was rented and given back is no warning: it is said beside the cost in summary.md.
    kept = [w for w in warnings if not str(w).startswith(GIVEN_BACK)]
    for text in kept[:ERROR_ANNOTATION_LIMIT]:
        print(command("warning", str(text), title="clore-run"), file=stream)
    stream.flush()


def annotate_run_errors(errors: Sequence[str], out: TextIO | None = None) -> None:
    """One `::error::` per error of the run that is no job's (an order that may be ours left
    running): the checks page shows it in red, where a warning would be overlooked."""
    stream = out or sys.stdout
    for text in list(errors)[:ERROR_ANNOTATION_LIMIT]:
        print(command("error", str(text), title="clore-run"), file=stream)
    stream.flush()


def annotate_spec_warnings(
    warnings: Sequence[SpecWarning], out: TextIO | None = None, env: Mapping[str, str] | None = None
) -> None:
    """In GitHub Actions, one `::warning file=…,line=…,col=…::` per warning of a valid file."""
    if not warnings or not is_active(env):
        return
    stream = out or sys.stdout
    workspace = (os.environ if env is None else env).get("GITHUB_WORKSPACE")
    for w in warnings[:ERROR_ANNOTATION_LIMIT]:
        where = w.location
        print(
            command(
                "warning",
                w.text,
                file=_repo_path(where.file, workspace),
                line=where.line,
                col=where.column,
                title="clore-run: pipeline",
            ),
            file=stream,
        )
    stream.flush()


def _job_annotation(job: SummaryJob, summary: Summary, workspace: str | None) -> str:
    loc = job.location
    source = (loc.file if loc else "") or summary.pipeline.source
    status = outcome(job.status, allowed=job.allowed_failure).words
    # The reason and the test names may come from the server: no command may be read from them.
    reason = console_line(job.reason or status)
    message = f"job '{console_line(job.name)}' {status}: {reason}"
    tests = [t for t in job.failed_tests if t.scope == "test"]
    if tests:
        names = ", ".join(console_line(t.name) for t in tests[:5])
        more = f" and {len(tests) - 5} more" if len(tests) > 5 else ""
        message += f"\nfailed tests: {names}{more}"
    return command(
        "warning" if job.allowed_failure else "error",
        message,
        file=_repo_path(source, workspace),
        line=loc.line if loc else None,
        col=loc.column if loc else None,
        title=f"clore-run: {job.name} {status}",
    )


def _repo_path(path: str, workspace: str | None) -> str:
    """Annotations link only for repository-relative paths. A relative path is relative to the
    current directory (the pipeline path as given), which need not be the workspace root."""
    workspace = workspace or os.environ.get("GITHUB_WORKSPACE", "")
    if workspace and path:
        try:
            full = os.path.normpath(os.path.join(os.getcwd(), path))  # an absolute path stays
            return Path(full).relative_to(workspace).as_posix()
        except (OSError, ValueError):
            return path
    return path


def write_outputs(path: Path, outputs: Mapping[str, str]) -> None:
    """Append step outputs to the `GITHUB_OUTPUT` file with the multi-line delimiter syntax."""

    chunks = []
    for name, value in outputs.items():
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        if delimiter in name or delimiter in value:  # cannot happen with a fresh uuid; be sure
            raise ValueError(f"output {name!r} contains its delimiter")
        chunks.append(f"{name}<<{delimiter}\n{redact.text(value)}\n{delimiter}\n")
    with path.open("a", encoding="utf-8") as fh:
        fh.write("".join(chunks))


def append_step_summary(path: Path, markdown: str, limit: int = STEP_SUMMARY_LIMIT) -> bool:
    """Append to `GITHUB_STEP_SUMMARY`, cut cleanly so the step's file stays under `limit`.

    Returns whether the Markdown had to be cut.
    """
    try:
        used = path.stat().st_size
    except OSError:
        used = 0
    room = max(0, limit - used - _SUMMARY_MARGIN)
    note = "\n_Cut to fit the 1 MiB step-summary limit: the full summary.md is in the output._\n"
    markdown = redact.text(markdown)
    text = cut_markdown(markdown, room, _utf8_len, note)
    if _utf8_len(text) > room:  # not even the note fits: write nothing rather than break it
        return True
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")
    return text != markdown


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def publish(
    paths: ReportPaths, env: Mapping[str, str] | None = None, out: TextIO | None = None
) -> None:
    """At the end of a run in Actions: annotations, step outputs and the step summary."""
    env = os.environ if env is None else env
    if not is_active(env):
        return
    summary = paths.read_summary()
    annotate_failures(summary, out, env.get("GITHUB_WORKSPACE"))
    annotate_run_warnings(summary.warnings, out)
    if env.get("GITHUB_OUTPUT"):
        write_outputs(
            Path(env["GITHUB_OUTPUT"]),
            {
                "status": summary.status,
                "total-cost-usd": f"{summary.total_cost_usd:.4f}",
                "junit-path": str(paths.junit),
                "summary-path": str(paths.summary_json),
                "summary-md-path": str(paths.summary_md),
            },
        )
    if env.get("GITHUB_STEP_SUMMARY"):
        markdown = paths.summary_md.read_text(encoding="utf-8")
        append_step_summary(Path(env["GITHUB_STEP_SUMMARY"]), markdown)
