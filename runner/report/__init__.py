"""Reports of a run: junit.xml, summary.json and summary.md in the output directory.

`write_reports` is what `run` calls, at the end of a run and when it is interrupted.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from runner import redact

# The builders (the XML writer, the timeline) load when reports are written, not for every command
# that only needs a path or load_summary.
if TYPE_CHECKING:
    from runner.core.model import RunRecord
    from runner.report.summary import Summary
    from runner.report.timeline import Timeline

__all__ = ["REPORT_FILES", "ReportPaths", "load_summary", "with_comparison", "write_reports"]

# Every file write_reports writes into the output folder, in the order it writes them: `run`
# reads this list to tell a clore-run output folder from a folder of the user's.
REPORT_FILES = ("junit.xml", "summary.json", "summary.md", "timeline.svg")


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
    baseline: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> ReportPaths:
    """Write REPORT_FILES into `out_dir`, each atomically.
    `notes` join the summary's warnings.

    Bad job JUnit files and a bad baseline become warnings. OSError (e.g. an unwritable
    `out_dir`) is raised: the caller decides what an unwritable output means.
    """
    from runner.report.junit import build_junit
    from runner.report.markdown import render_markdown
    from runner.report.summary import build_summary

    out_dir.mkdir(parents=True, exist_ok=True)
    junit_xml, summary_json, summary_md, timeline_svg = (out_dir / n for n in REPORT_FILES)
    paths = ReportPaths(junit_xml, summary_json, summary_md)
    junit = build_junit(out_dir, record)
    atomic_write(paths.junit, junit.xml)
    summary = build_summary(out_dir, record, junit)
    summary["warnings"] = [*summary["warnings"], *notes]
    if baseline is not None:
        summary = with_comparison(summary, baseline)
    body = dump_summary(summary)
    written = redact.data(body)
    _write_atomically(paths.summary_json, written)
    timeline = timeline_of(summary)  # drawn twice: in summary.md and as timeline.svg
    atomic_write(paths.summary_md, render_markdown(summary, timeline).encode("utf-8"))
    atomic_write(timeline_svg, svg_of(summary, timeline).encode("utf-8"))
    return ReportPaths(
        paths.junit,
        paths.summary_json,
        paths.summary_md,
        tuple(summary["warnings"]),
        timeline_svg,
        summary if written == body else None,
    )


def timeline_of(summary: Summary) -> Timeline:
    """The timeline model of a summary dict."""
    from runner.report.timeline import build_timeline, records_from_summary

    return build_timeline(records_from_summary(summary))


def svg_of(summary: Summary, timeline: Timeline | None = None) -> str:
    """timeline.svg of a summary dict (`timeline`: its model, when already built)."""
    from runner.report.timeline_svg import render_svg

    model = timeline_of(summary) if timeline is None else timeline
    return render_svg(model, str(summary.get("pipeline", {}).get("name", "")))


def with_comparison(summary: Summary, baseline: Mapping[str, Any]) -> Summary:
    """`summary` with its `comparison` filled in, or a warning when the baseline is unusable."""
    from runner.report.compare import BadBaseline, compare

    summary = dict(summary)
    try:
        summary["comparison"] = compare(summary, baseline)
    except (BadBaseline, KeyError, TypeError, AttributeError) as exc:
        summary["warnings"] = [*summary.get("warnings", []), f"baseline ignored: {exc}"]
        return summary
    theirs, ours = _pipeline_name(baseline), _pipeline_name(summary)
    if theirs is not None and ours is not None and theirs != ours:
        summary["warnings"] = [
            *summary.get("warnings", []),
            f"the baseline is a run of pipeline '{theirs}', this is '{ours}': "
            "its jobs and costs may not compare (pass a summary.json of the same pipeline)",
        ]
    return summary


def _pipeline_name(summary: Mapping[str, Any]) -> str | None:
    pipeline = summary.get("pipeline")
    name = pipeline.get("name") if isinstance(pipeline, Mapping) else None
    return name if isinstance(name, str) else None


def load_summary(path: Path) -> Summary:
    """Read a summary.json. Raises OSError or ValueError (bad JSON, not an object)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def dump_summary(summary: Mapping[str, Any]) -> bytes:
    """summary.json: a top-level field per line, and in `jobs` a job per line, so that a
    person (or grep) finds a field or a job by line. Not `indent=2`: json then leaves its C
    encoder for the pure-Python one, which took longer than writing every other report."""
    lines = []
    for key, value in summary.items():
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
