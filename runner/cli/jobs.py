"""`clore-run jobs` and `clore-run logs JOB`: a running `serve`'s queue, read from the terminal.

Exit codes as the other client commands: 0 ok, 2 usage or a 4xx reply, 3 unreachable or 5xx.
What the server sends back (job names, reasons, log lines) came from users and from rented
servers: it is shown as inert text, never as terminal control sequences or workflow commands.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, BinaryIO

import typer

from runner.cli.serve import Server, status_word
from runner.clock import SYSTEM_CLOCK
from runner.serve import DEFAULT_SERVER
from runner.untrusted import console_line

STATUSES = ("queued", "running", "passed", "failed", "timed_out", "error", "skipped", "cancelled")
_PAGE = 1000
_MAX_PAGES = 1000  # a million jobs: far past any queue this reads, and still an end
_COLUMNS = ("ID", "STATUS", "NAME", "TRIES", "COST", "SUBMITTED", "REASON")
_REASON_WIDTH = 60


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)
    app.command("logs")(logs)


def jobs(
    status: Annotated[
        str | None, typer.Option(help=f"Only jobs in this state: {', '.join(STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show the last N jobs submitted.")] = 50,
    server: Server = DEFAULT_SERVER,
) -> None:
    """List the queue's jobs (the latest last): status, tries, cost and why."""
    from runner.errors import UsageError
    from runner.serve.client import Client
    from runner.spec.diagnostics import did_you_mean

    if status is not None and status not in STATUSES:
        hint = did_you_mean(status, STATUSES) or f"one of {', '.join(STATUSES)}"
        raise UsageError(f"--status {status}: not a job state", hint)
    shown = collections.deque(_all_jobs(Client(server), status), maxlen=limit)
    if not shown:
        typer.echo(f"no {status + ' ' if status else ''}jobs on {server}", err=True)
        return
    typer.echo(render_jobs(list(shown), SYSTEM_CLOCK.time()))


def _all_jobs(client: Any, status: str | None) -> Iterator[dict[str, Any]]:
    after = 0
    for _ in range(_MAX_PAGES):
        page = client.jobs(status, after, _PAGE)
        yield from page.get("jobs", [])
        if page.get("next_after") is None:
            return
        after = int(page["next_after"])


def render_jobs(rows: list[dict[str, Any]], now: float) -> str:
    """A plain, aligned table (no colours: it may end up in a CI log)."""
    table = [_COLUMNS, *(_job_row(r, now) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


def _job_row(job: dict[str, Any], now: float) -> tuple[str, ...]:
    from runner.core.money import usd_text

    why = job.get("reason") or (
        f"waiting for {job['waiting_for']}" if job.get("waiting_for") else ""
    )
    reason = console_line(str(why))
    if len(reason) > _REASON_WIDTH:
        reason = reason[: _REASON_WIDTH - 1] + "…"
    return (
        console_line(str(job["id"])),
        status_word(job),
        console_line(str(job["name"]))[:40],
        str(job["attempts"]),
        usd_text(float(job["cost_usd"])),
        _ago(now - _unix(job["submitted_at"])),
        reason,
    )


def _unix(stamp: str) -> float:
    """An API time (ISO 8601) as unix seconds."""
    import datetime as dt

    return dt.datetime.fromisoformat(stamp).timestamp()


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def logs(
    job: Annotated[str, typer.Argument(help="The job id, e.g. s7.train.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    raw: Annotated[
        bool, typer.Option(help="The bytes as logged, control sequences and all.")
    ] = False,
    server: Server = DEFAULT_SERVER,
) -> None:
    """Print a job's log (every attempt); with -f, as it is written, until the job ends."""
    from runner.serve.client import Client

    client = Client(server)
    chunks = client.log(job, follow)
    out = sys.stdout.buffer
    if raw:
        for chunk in chunks:
            out.write(chunk)
            out.flush()
    else:
        write_safe_lines(chunks, out)
    if follow:
        raise typer.Exit(_ended(client.job(job)))


# A followed job's end as an exit code, as `run` gives a run's: 0 it passed (or failed as
# continue-on-error allows), 1 it did not (skipped or cancelled too), 3 infrastructure.
_FOLLOWED_EXIT = {"passed": 0, "error": 3}


def _ended(reply: dict[str, Any]) -> int:
    """The closing line of a followed log: how the job ended (a job skipped before it wrote a
    line would otherwise end with nothing said), and its exit code."""
    reason = reply.get("reason") or ""
    said = console_line(f"{reply['id']}: {status_word(reply)}" + (f": {reason}" if reason else ""))
    typer.echo(f"clore-run: {said}", err=True)
    if reply.get("allowed_failure"):
        return 0
    return _FOLLOWED_EXIT.get(str(reply.get("status")), 1)


def write_safe_lines(chunks: Iterable[bytes], out: BinaryIO) -> None:
    """Each complete line made inert (console_line), written as soon as it is complete; a last
    line without its newline at the end."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            out.write(b"".join(_safe(line) + b"\n" for line in lines))
            out.flush()
    if pending:
        out.write(_safe(pending) + b"\n")
        out.flush()


def _safe(line: bytes) -> bytes:
    text = line.decode("utf-8", "replace")
    # A tqdm bar redraws with \r: its latest state is what the line shows.
    latest = text.rstrip("\r").rsplit("\r", 1)[-1]
    return console_line(latest).encode("utf-8")
