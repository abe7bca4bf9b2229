"""Reports of a run: junit.xml, summary.json, summary.md and timeline.svg in the output directory.

`write_reports` is what `run` calls, at the end of a run and when it is interrupted. Each report is
one entry of REPORTS: its file name, and how its bytes are drawn from what every report is drawn
from (`Drawn`: the JUnit report, the summary, the timeline). `run` reads the same list to tell a
clore-run output folder from a folder of the user's.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from runner import redact

# The builders (the XML writer, the summary's model, the timeline) load when reports are written
# or read, not for every command that only needs a path.
if TYPE_CHECKING:
    from runner.core.model import RunRecord
    from runner.report.junit import JUnitReport
    from runner.report.summary_model import Summary
    from runner.report.timeline import Timeline

__all__ = [
    "REPORTS",
    "REPORT_FILES",
    "ReportPaths",
    "load_summary",
    "read_json",
    "with_comparison",
    "write_reports",
]


class Drawn(NamedTuple):
    """What every report of a run is drawn from."""

    junit: JUnitReport
    summary: Summary
    timeline: Timeline  # drawn twice: in summary.md and as timeline.svg


class Report(NamedTuple):
    """One file write_reports writes: its name in the output folder, and its bytes."""

    name: str
    draw: Callable[[Drawn], bytes]


def _junit_xml(drawn: Drawn) -> bytes:
    return drawn.junit.xml


def _summary_json(drawn: Drawn) -> bytes:
    return dump_summary(drawn.summary)


def _summary_md(drawn: Drawn) -> bytes:
    from runner.report.markdown import render_markdown  # with the reports, not with `run`'s start

    return render_markdown(drawn.summary, drawn.timeline).encode("utf-8")


def _timeline_svg(drawn: Drawn) -> bytes:
    return svg_of(drawn.summary, drawn.timeline).encode("utf-8")


JUNIT_XML, SUMMARY_JSON, SUMMARY_MD, TIMELINE_SVG = (
    "junit.xml",
    "summary.json",
    "summary.md",
    "timeline.svg",
)
# Every file write_reports writes into the output folder, in the order it writes them.
REPORTS = (
    Report(JUNIT_XML, _junit_xml),
    Report(SUMMARY_JSON, _summary_json),
    Report(SUMMARY_MD, _summary_md),
    Report(TIMELINE_SVG, _timeline_svg),
)
REPORT_FILES = tuple(r.name for r in REPORTS)


class ReportPaths(NamedTuple):
    """Where the reports went, and what was wrong with the inputs (never fatal)."""

    junit: Path
    summary_json: Path
    summary_md: Path
    warnings: tuple[str, ...] = ()
    timeline_svg: Path | None = None
    # What summary.json holds, kept so the end of a run need not read back what it just wrote;
    # None when a secret was taken out of the file (then only the file has it right).
    summary: Summary | None = None

    def read_summary(self) -> Summary:
        """summary.json's content. Raises OSError or ValueError when it must be read and
        cannot."""
        return load_summary(self.summary_json) if self.summary is None else self.summary


def write_reports(
    out_dir: Path,
    record: RunRecord,
    baseline: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
    exit_code: int | None = None,
) -> ReportPaths:
    """Write REPORTS into `out_dir`, each atomically; `baseline`: an earlier summary.json as
    read (its JSON object). `notes` join the summary's warnings; `exit_code`: what the run
    exits with, when not what its status gives.

    Bad job JUnit files and a bad baseline become warnings. OSError (e.g. an unwritable
    `out_dir`) is raised: the caller decides what an unwritable output means.
    """
    # a writer loads when its report is written: `validate` and the CLI import this package
    from runner.report.junit import build_junit
    from runner.report.summary import build_summary

    out_dir.mkdir(parents=True, exist_ok=True)
    junit = build_junit(out_dir, record)
    summary = build_summary(out_dir, record, junit, notes=notes, exit_code=exit_code)
    if baseline is not None:
        summary = with_comparison(summary, baseline)
    drawn = Drawn(junit, summary, timeline_of(summary))
    redacted: set[str] = set()
    for report in REPORTS:
        body = report.draw(drawn)
        written = redact.data(body)
        _write_atomically(out_dir / report.name, written)
        if written != body:
            redacted.add(report.name)
    return ReportPaths(
        out_dir / JUNIT_XML,
        out_dir / SUMMARY_JSON,
        out_dir / SUMMARY_MD,
        tuple(summary.warnings),
        out_dir / TIMELINE_SVG,
        None if SUMMARY_JSON in redacted else summary,
    )


def timeline_of(summary: Summary) -> Timeline:
    """The timeline model of a summary."""
    # a writer loads when its report is written: `validate` and the CLI import this package
    from runner.report.timeline import build_timeline, records_from_summary

    return build_timeline(records_from_summary(summary))


def svg_of(summary: Summary, timeline: Timeline | None = None) -> str:
    """timeline.svg of a summary (`timeline`: its model, when already built)."""
    # a writer loads when its report is written: `validate` and the CLI import this package
    from runner.report.timeline_svg import render_svg

    model = timeline_of(summary) if timeline is None else timeline
    return render_svg(model, summary.pipeline.name)


def with_comparison(summary: Summary, baseline: Mapping[str, Any]) -> Summary:
    """`summary` with its `comparison` filled in from `baseline` (an earlier summary.json's
    JSON object), or a warning when the baseline is unusable."""
    # a writer loads when its report is written: `validate` and the CLI import this package
    from runner.report.compare import BadBaseline, compare, parse_baseline

    try:
        base = parse_baseline(baseline)
    except BadBaseline as exc:
        return summary.model_copy(
            update={"warnings": [*summary.warnings, f"baseline ignored: {exc}"]}
        )
    warnings = list(summary.warnings)
    theirs, ours = base.pipeline.name, summary.pipeline.name
    if theirs and ours and theirs != ours:
        warnings.append(
            f"the baseline is a run of pipeline '{theirs}', this is '{ours}': "
            "its jobs and costs may not compare (pass a summary.json of the same pipeline)"
        )
    return summary.model_copy(update={"comparison": compare(summary, base), "warnings": warnings})


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file. Raises OSError or ValueError (bad JSON, not an object)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def load_summary(path: Path) -> Summary:
    """Read a summary.json, as `parse_summary` reads one. Raises OSError or ValueError (bad
    JSON, not an object, not a summary)."""
    from runner.report.summary_model import parse_summary  # pydantic: where a summary is read

    data = read_json(path)
    try:
        return parse_summary(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a clore-run summary ({exc})") from None


def dump_summary(summary: Summary | Mapping[str, Any]) -> bytes:
    """summary.json: a top-level field per line, and in `jobs` a job per line, so that a
    person (or grep) finds a field or a job by line. Not `indent=2`: json then leaves its C
    encoder for the pure-Python one, which took longer than writing every other report."""
    data = summary if isinstance(summary, Mapping) else summary.to_json()
    lines = []
    for key, value in data.items():
        if key == "jobs" and isinstance(value, list) and value:
            jobs = ",\n".join(f"    {_json(job)}" for job in value)
            lines.append(f'  "jobs": [\n{jobs}\n  ]')
        else:
            lines.append(f"  {_json(key)}: {_json(value)}")
    body = ",\n".join(lines)
    return (f"{{\n{body}\n}}\n" if lines else "{}\n").encode("utf-8")


def _json(value: object) -> str:
    return _ENCODER.encode(value)


# One encoder for every value: json.dumps with an argument builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


@functools.cache
def _umask() -> int:
    """The process's umask. Linux says it in /proc; elsewhere reading it means setting it, done
    once (a key file written by another thread meanwhile would get the wrong mode)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same directory and `os.replace`: readers never see half,
    nor does anyone after clore-run is killed (SIGKILL from CI), since the page cache outlives
    the process. Not fsync'd: that only matters when the machine itself goes down, which takes
    the CI job with it, and four fsyncs cost a fifth of writing the reports of 200 short jobs.
    Every report passes here, so here the known secrets are taken out of it, whatever field
    (a job name, a GPU name, a test's output) carried them."""
    _write_atomically(path, redact.data(data))


def _write_atomically(path: Path, data: bytes) -> None:
    """`atomic_write` of data already redacted."""

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; reports are read by other users (CI containers often
        # run the upload step as another user), so they get the mode any new file gets.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
