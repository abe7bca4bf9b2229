"""Read the JUnit file a job wrote, which comes from a machine we do not control.

Untrusted input, so: a size cap before reading, DTDs and entity declarations refused (billion
laughs, external entities), a cap on the number of testcases, and every problem turned into a
warning rather than an exception, so a broken file never breaks the run's own report. Secrets
are redacted from every text kept (a test may print its environment).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from runner.report.text import clip, redact, xml_safe

# The XML parser loads when a job has a JUnit file to read: every run writes junit.xml, few
# merge a job's own.
if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

MAX_BYTES = 20 * 1024 * 1024
MAX_CASES = 5000
MAX_OUTPUT_CHARS = 16 * 1024  # per testcase system-out / system-err / failure text
MAX_MESSAGE_CHARS = 1000

Outcome = Literal["passed", "failure", "error", "skipped"]
# Most severe first: when a testcase carries several results, the worst one wins.
_RESULT_TAGS: tuple[Outcome, ...] = ("error", "failure", "skipped")


@dataclass(frozen=True)
class Case:
    """One testcase from a job's JUnit, normalised."""

    classname: str
    name: str
    time: float
    outcome: Outcome = "passed"
    message: str = ""
    result_type: str = ""
    details: str = ""
    system_out: str = ""
    system_err: str = ""
    job_level: bool = False  # stands for the whole job, not a test inside it


@dataclass(frozen=True)
class JobJUnit:
    """What came out of a job's JUnit file: the cases kept and what went wrong."""

    cases: tuple[Case, ...] = ()
    warnings: tuple[str, ...] = ()
    found: bool = False  # a file was there and parsed


class UnsafeXml(ValueError):
    """The document declares a DTD or entities."""


def read_job_junit(path: Path, label: str) -> JobJUnit:
    """Parse `path`; `label` names it in warnings. Never raises."""
    import xml.etree.ElementTree as ET
    from xml.parsers import expat

    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return JobJUnit(warnings=(f"{label}: JUnit file not found",))
    except OSError as exc:
        return JobJUnit(warnings=(f"{label}: cannot read JUnit file: {exc.strerror}",))
    if size > MAX_BYTES:
        mib = MAX_BYTES // (1024 * 1024)
        return JobJUnit(warnings=(f"{label}: JUnit file is {size} bytes, over {mib} MiB; ignored",))
    try:
        root = parse_untrusted(path.read_bytes())
    except (UnsafeXml, ET.ParseError, expat.ExpatError) as exc:
        return JobJUnit(warnings=(f"{label}: JUnit file is not usable XML: {exc}; ignored",))
    except OSError as exc:
        return JobJUnit(warnings=(f"{label}: cannot read JUnit file: {exc.strerror}",))
    return _collect(root, label)


def parse_untrusted(data: bytes) -> ET.Element:
    """Parse XML, refusing DTDs and entity declarations before expat expands anything."""
    import xml.etree.ElementTree as ET
    from xml.parsers import expat

    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:  # the cheap check for the common encodings
        raise UnsafeXml("DTD or entity declaration refused")
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _refuse  # the encoding-proof check
    parser.EntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse_external
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = lambda tag: builder.end(tag)
    parser.CharacterDataHandler = builder.data
    parser.ordered_attributes = False
    parser.Parse(data, True)
    return builder.close()


def _refuse(*_args: object) -> None:
    raise UnsafeXml("DTD or entity declaration refused")


def _refuse_external(*_args: object) -> int:
    raise UnsafeXml("external entity refused")


def _collect(root: ET.Element, label: str) -> JobJUnit:
    if root.tag not in ("testsuites", "testsuite"):
        return JobJUnit(warnings=(f"{label}: root element <{root.tag}> is not JUnit; ignored",))
    cases: list[Case] = []
    warnings: list[str] = []
    for element in root.iter("testcase"):
        if len(cases) >= MAX_CASES:
            warnings.append(f"{label}: more than {MAX_CASES} testcases; the rest are left out")
            break
        cases.append(_case(element))
    return JobJUnit(cases=tuple(cases), warnings=tuple(warnings), found=True)


def _case(element: ET.Element) -> Case:
    outcome: Outcome = "passed"
    result: ET.Element | None = None
    for tag in _RESULT_TAGS:
        result = element.find(tag)
        if result is not None:
            outcome = tag
            break
    return Case(
        classname=_attr(element, "classname"),
        name=_attr(element, "name") or "(unnamed)",
        time=_seconds(element.get("time")),
        outcome=outcome,
        message=_attr(result, "message", MAX_MESSAGE_CHARS),
        result_type=_attr(result, "type"),
        details=_text(result),
        system_out=_text(element.find("system-out")),
        system_err=_text(element.find("system-err")),
    )


def _attr(element: ET.Element | None, name: str, limit: int = 1000) -> str:
    if element is None:
        return ""
    return clip(redact(xml_safe(element.get(name, ""))), limit)


def _text(element: ET.Element | None) -> str:
    if element is None:
        return ""
    return clip(redact(xml_safe("".join(element.itertext()))), MAX_OUTPUT_CHARS)


def _seconds(value: str | None) -> float:
    """JUnit `time`; Surefire writes thousands separators ("1,234.5")."""
    try:
        seconds = float((value or "0").replace(",", ""))
    except ValueError:
        return 0.0
    return seconds if 0.0 <= seconds < 1e9 else 0.0
