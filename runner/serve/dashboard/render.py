"""jinja2 for the dashboard: autoescaped everywhere (job names, log lines, file names and
messages come from servers and users), with the few filters the pages format numbers with."""

from __future__ import annotations

import datetime as dt
import urllib.parse
from pathlib import Path
from typing import Any

import jinja2

from runner.outcome import status_words as status_said
from runner.serve.dashboard import pictures
from runner.serve.dashboard.reads import PAGE_SIZE, SubmissionData
from runner.serve.views import allowed_failure, look, status_words
from runner.stores.queue import JobMatch, JobRow

TEMPLATES = Path(__file__).with_name("templates")


class Renderer:
    def __init__(self) -> None:
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,  # every template, whatever its name ends with
            undefined=jinja2.StrictUndefined,  # a misspelt field fails a test, not a page
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters.update(
            when=when,
            usd=usd,
            rate=rate,
            duration=duration,
            size=size,
            q=quote,
            qpath=quote_path,
            status_words=status_words,  # `failed (allowed)`, as the API and `run` say
            look=look,  # the words and the colour class together
            said=status_said,  # `timed out`, never the stored `timed_out`
        )
        self._env.globals.update(dag=_dag, timeline=_timeline, queue_url=queue_url)

    def page(self, name: str, base: dict[str, Any] | None, **values: Any) -> str:
        """A whole page; `base` None: the visitor is not logged in (no menu, no CSRF)."""
        return self._env.get_template(name).render(base=base, **values)

    def fragment(self, name: str, **values: Any) -> str:
        return self._env.get_template(name).render(**values)


def _dag(jobs: list[tuple[JobRow, dict[str, Any]]]) -> pictures.Dag:
    return pictures.dag([(r.id, r.name, r.status, spec.get("needs", [])) for r, spec in jobs])


def _timeline(data: SubmissionData, now: float) -> pictures.Timeline | None:
    names = {row.id: row.name for row, _ in data.jobs}
    allowed = {row.id for row, spec in data.jobs if allowed_failure(row.status, spec)}
    return pictures.timeline(data.attempts, names, now, allowed)


_KEEP = object()


def queue_url(
    match: JobMatch,
    limit: int,
    status: object = _KEEP,
    after: int | None = None,
    before: int | None = None,
) -> str:
    """The queue page with `match`'s filters, a status changed or a page moved; a new
    filter starts at the first page."""
    chosen = match.status if status is _KEEP else status
    values = {
        "status": chosen,
        "q": match.name,
        "submission": match.submission,
        "after": after,
        "before": before,
        "limit": limit if limit != PAGE_SIZE else None,
    }
    query = urllib.parse.urlencode({k: v for k, v in values.items() if v not in (None, "")})
    return "/?" + query if query else "/"


def when(stamp: float | None) -> str:
    if stamp is None:
        return "—"
    try:
        return dt.datetime.fromtimestamp(stamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{stamp:.0f} s after 1970"


def usd(amount: float | None) -> str:
    if amount is None:
        return "—"
    return f"${amount:,.4f}" if abs(amount) < 10 else f"${amount:,.2f}"


def rate(per_hour: float | None) -> str:
    return "—" if per_hour is None else f"{usd(per_hour)}/h"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / 1024:.1f} KiB"
    if n < 1 << 30:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / (1 << 30):.1f} GiB"


def quote(text: str) -> str:
    """For a path segment or query value in a link: a job id is never another path."""
    return urllib.parse.quote(text, safe="")


def quote_path(text: str) -> str:
    """An artifact's path under its folder, its slashes kept."""
    return urllib.parse.quote(text, safe="/")
