"""Read the JUnit file a job wrote, which comes from a machine we do not control.

Untrusted input, so: a size cap before reading, DTDs and entity declarations refused (billion
laughs, external entities), a cap on nesting depth and on the number of testcases, and every
problem turned into a warning rather than an exception, so a broken file never breaks the run's
own report. Secrets are redacted from every text kept (a test may print its environment).

The file is read as a stream (expat fed a chunk at a time, as ElementTree's iterparse does):
only the testcases, the suites' properties and their output are kept, each text capped while it
is read, so memory follows what is kept and not the document's size or shape. A whole tree of a
20 MiB file nested three million deep took 855 MB and 5 s.

A report that cannot be read to its end (not XML, too big, too deep, not JUnit) may have held a
failing test: `unreadable` says why, and junit.xml shows it as an errored testcase (the reporters
read testcases, not warnings). The testcases read before the problem are kept.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from runner.report.text import clip, redact, xml_safe

if TYPE_CHECKING:
    from xml.parsers.expat import XMLParserType

MAX_BYTES = 20 * 1024 * 1024
MAX_DEPTH = 64  # JUnit nests 4 or 5 deep (suites may nest); a deeper file is an attack
MAX_CASES = 5000
MAX_PROPERTIES = 200  # suite properties kept per job
MAX_RERUNS = 20  # flaky/rerun elements kept per testcase
MAX_OUTPUT_CHARS = 16 * 1024  # per testcase system-out / system-err / failure text
MAX_SUITE_OUTPUT_CHARS = 64 * 1024  # the suites' own system-out / system-err, all together
MAX_MESSAGE_CHARS = 1000
_CHUNK = 64 * 1024

Outcome = Literal["passed", "failure", "error", "skipped"]
# Most severe first: when a testcase carries several results, the worst one wins.
_RESULT_TAGS: tuple[Outcome, ...] = ("error", "failure", "skipped")
RERUN_TAGS = ("rerunFailure", "flakyFailure", "rerunError", "flakyError")
_OUTPUTS = ("system-out", "system-err")
_RERUN_CHILDREN = ("stackTrace", *_OUTPUTS)
_WATCHED = frozenset({"testcase", "property", *_OUTPUTS})  # what matters outside a testcase
_SEVERITY = {"passed": 0, "skipped": 1, "failure": 2, "error": 3}


class Rerun(NamedTuple):
    """A Surefire retry element of a testcase, as the job's report wrote it."""

    tag: str  # one of RERUN_TAGS
    message: str
    type: str
    stack_trace: str
    system_out: str
    system_err: str


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
    reruns: tuple[Rerun, ...] = ()


@dataclass(frozen=True)
class JobJUnit:
    """What came out of a job's JUnit file: the cases kept and what went wrong."""

    cases: tuple[Case, ...] = ()
    warnings: tuple[str, ...] = ()
    found: bool = False  # a file was there and some of it was JUnit
    properties: tuple[tuple[str, str], ...] = ()  # the suites' <property> name/value pairs
    system_out: str = ""  # the suites' own output
    system_err: str = ""
    unreadable: str = ""  # why the file could not be read to its end; "" when it was


class UnsafeXml(ValueError):
    """The document declares a DTD or entities."""


class _Unusable(ValueError):
    """The document is XML but not a JUnit report this reader will take."""


def read_job_junit(path: Path, label: str) -> JobJUnit:
    """Parse `path`; `label` names it in warnings. Never raises."""
    from xml.parsers import expat  # only a job with a JUnit file parses XML

    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return JobJUnit(warnings=(f"{label}: JUnit file not found",))
    except OSError as exc:
        return JobJUnit(warnings=(f"{label}: cannot read JUnit file: {exc.strerror}",))
    collector = _Collector(label)
    if size > MAX_BYTES:
        mib = MAX_BYTES // (1024 * 1024)
        return _unreadable(collector, f"is {size} bytes, over {mib} MiB, and was not read")
    try:
        with path.open("rb") as file:
            parser = collector.parser()
            while chunk := file.read(_CHUNK):
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
    except (UnsafeXml, expat.ExpatError) as exc:
        return _unreadable(collector, f"is not usable XML: {exc}")
    except _Unusable as exc:
        return _unreadable(collector, str(exc))
    except OSError as exc:
        return JobJUnit(warnings=(f"{label}: cannot read JUnit file: {exc.strerror}",))
    return collector.result()


def _unreadable(collector: _Collector, why: str) -> JobJUnit:
    """What was read before the problem, and the problem: `why` follows "JUnit file"."""
    done = collector.result()
    kept = f"; the {len(done.cases)} testcases before it are kept" if done.cases else ""
    warning = f"{collector.label}: JUnit file {why}{kept}; junit.xml shows it as an errored test"
    return dataclasses.replace(done, warnings=(*done.warnings, warning), unreadable=why)


def _refuse(*_args: object) -> None:
    raise UnsafeXml("DTD or entity declaration refused")


def _refuse_external(*_args: object) -> int:
    raise UnsafeXml("external entity refused")


@dataclass
class _Open:
    """A testcase being read."""

    attrs: dict[str, str]
    counted_only: bool = False  # past MAX_CASES: only its outcome is kept
    outcome: Outcome = "passed"
    result: dict[str, str] = field(default_factory=dict)
    details: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    reruns: list[Rerun] = field(default_factory=list)


class _Text:
    """Character data of one element, capped while it arrives."""

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit + 1  # one more than kept: clip() then marks the cut

    def add(self, data: str) -> None:
        if self.left > 0:
            self.parts.append(data[: self.left])
            self.left -= len(data)

    def value(self, limit: int) -> str:
        return clip(redact(xml_safe("".join(self.parts))), limit)


class _Collector:
    """expat's handlers: the stack of open tags, and what is kept of them."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.stack: list[str] = []
        self.cases: list[Case] = []
        self.omitted = 0  # testcases past MAX_CASES
        self.omitted_bad: dict[Outcome, int] = {}
        self.properties: dict[str, str] = {}
        self.suite_out: dict[str, _Text] = {tag: _Text(MAX_SUITE_OUTPUT_CHARS) for tag in _OUTPUTS}
        self.case: _Open | None = None
        self.rerun: dict[str, str] | None = None  # attributes of the open rerun element
        self.rerun_texts: dict[str, _Text] = {}
        self.text: _Text | None = None  # where character data goes now
        self.text_depth = 0  # the depth of the element whose text that is
        self.root_seen = False

    def parser(self) -> XMLParserType:
        from xml.parsers import expat  # only a job with a JUnit file parses XML

        parser = expat.ParserCreate()
        parser.StartDoctypeDeclHandler = _refuse  # before any entity is expanded, any encoding
        parser.EntityDeclHandler = _refuse
        parser.ExternalEntityRefHandler = _refuse_external
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.CharacterDataHandler = self.data
        parser.buffer_text = True
        return parser

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        """Every element: kept short, since most are neither a testcase nor inside one."""
        stack = self.stack
        if len(stack) >= MAX_DEPTH:
            raise _Unusable(f"nests elements deeper than {MAX_DEPTH}, which JUnit never does")
        if not stack:
            self._root(tag)
        stack.append(tag)
        if tag in _WATCHED or self.case is not None or self.text is not None:
            self._start(tag, attrs, stack)

    def _root(self, tag: str) -> None:
        if tag not in ("testsuites", "testsuite"):
            raise _Unusable(f"is not JUnit: its root element is <{clip(xml_safe(tag), 40)}>")
        self.root_seen = True

    def _start(self, tag: str, attrs: dict[str, str], stack: list[str]) -> None:
        if self.text is not None:  # inside a text kept whole: a child's text is part of it
            return
        parent = stack[-2] if len(stack) > 1 else ""
        case = self.case
        if case is None:
            if tag == "testcase":
                self.case = _Open(attrs, counted_only=len(self.cases) >= MAX_CASES)
            elif tag == "property" and parent == "properties" and stack[-3:-2] == ["testsuite"]:
                self._property(attrs)
            elif tag in _OUTPUTS and parent == "testsuite":
                self._capture(self.suite_out[tag])
        elif parent == "testcase":
            if tag in _RESULT_TAGS and _SEVERITY[tag] > _SEVERITY[case.outcome]:
                case.outcome, case.result = tag, attrs
                if not case.counted_only:
                    self._capture(_Text(MAX_OUTPUT_CHARS))
            elif case.counted_only:
                return
            elif tag in RERUN_TAGS and len(case.reruns) < MAX_RERUNS:
                self.rerun, self.rerun_texts = attrs, {}
            elif tag in _OUTPUTS:
                self._capture(_Text(MAX_OUTPUT_CHARS))
        elif tag in _RERUN_CHILDREN and parent in RERUN_TAGS and self.rerun is not None:
            self._capture(self.rerun_texts.setdefault(tag, _Text(MAX_OUTPUT_CHARS)))

    def _capture(self, text: _Text) -> None:
        self.text, self.text_depth = text, len(self.stack)

    def data(self, text: str) -> None:
        if self.text is not None:
            self.text.add(text)

    def end(self, tag: str) -> None:
        stack = self.stack
        if self.case is None and self.text is None:  # most elements: nothing kept
            stack.pop()
            return
        captured = None
        if self.text is not None and len(stack) == self.text_depth:
            captured, self.text = self.text, None
        stack.pop()
        case = self.case
        if case is None or (captured is None and self.text is not None):
            return
        parent = stack[-1] if stack else ""
        if tag == "testcase":
            self.case = None
            self._close_case(case)
        elif parent == "testcase" and captured is not None:
            if tag in _RESULT_TAGS:
                case.details = captured.value(MAX_OUTPUT_CHARS)
            elif tag in _OUTPUTS:
                case.outputs[tag] = captured.value(MAX_OUTPUT_CHARS)
        elif parent == "testcase" and tag in RERUN_TAGS and self.rerun is not None:
            case.reruns.append(self._close_rerun(tag, self.rerun))
            self.rerun = None

    def _close_rerun(self, tag: str, attrs: dict[str, str]) -> Rerun:
        texts = self.rerun_texts
        value = {k: t.value(MAX_OUTPUT_CHARS) for k, t in texts.items()}
        return Rerun(
            tag,
            _attr(attrs, "message", MAX_MESSAGE_CHARS),
            _attr(attrs, "type"),
            value.get("stackTrace", ""),
            value.get("system-out", ""),
            value.get("system-err", ""),
        )

    def _close_case(self, case: _Open) -> None:
        if len(self.cases) >= MAX_CASES:
            self.omitted += 1
            if case.outcome != "passed":
                self.omitted_bad[case.outcome] = self.omitted_bad.get(case.outcome, 0) + 1
            return
        self.cases.append(
            Case(
                classname=_attr(case.attrs, "classname"),
                name=_attr(case.attrs, "name") or "(unnamed)",
                time=_seconds(case.attrs.get("time")),
                outcome=case.outcome,
                message=_attr(case.result, "message", MAX_MESSAGE_CHARS),
                result_type=_attr(case.result, "type"),
                details=case.details,
                system_out=case.outputs.get("system-out", ""),
                system_err=case.outputs.get("system-err", ""),
                reruns=tuple(case.reruns),
            )
        )

    def _property(self, attrs: dict[str, str]) -> None:
        name = _attr(attrs, "name", 200)
        if name and name not in self.properties and len(self.properties) < MAX_PROPERTIES:
            self.properties[name] = _attr(attrs, "value", 2000)

    def result(self) -> JobJUnit:
        cases = list(self.cases)
        warnings: list[str] = []
        if self.omitted:
            warnings.append(f"{self.label}: more than {MAX_CASES} testcases; the rest are left out")
            cases.append(self._omitted_case())
        return JobJUnit(
            cases=tuple(cases),
            warnings=tuple(warnings),
            found=self.root_seen,
            properties=tuple(self.properties.items()),
            system_out=self.suite_out["system-out"].value(MAX_SUITE_OUTPUT_CHARS),
            system_err=self.suite_out["system-err"].value(MAX_SUITE_OUTPUT_CHARS),
        )

    def _omitted_case(self) -> Case:
        """One testcase for the testcases past the cap: it fails when any of them did, so a
        failure past the cap still turns the check red."""
        bad = self.omitted_bad
        outcome: Outcome = (
            "error" if "error" in bad else "failure" if "failure" in bad else "passed"
        )
        if outcome == "passed" and bad.get("skipped") == self.omitted:
            outcome = "skipped"
        counted = ", ".join(f"{n} {word}" for word, n in sorted(bad.items()))
        message = f"{self.omitted} more testcases past the first {MAX_CASES} were left out"
        return Case(
            classname="",
            name=f"{self.omitted} more testcases (not listed)",
            time=0.0,
            outcome=outcome,
            message=message + (f": {counted}" if counted else ""),
            result_type="omitted_testcases" if outcome != "skipped" else "",
        )


def _attr(attrs: dict[str, str], name: str, limit: int = 1000) -> str:
    return clip(redact(xml_safe(attrs.get(name, ""))), limit)


def _seconds(value: str | None) -> float:
    """JUnit `time`; Surefire writes thousands separators ("1,234.5")."""
    try:
        seconds = float((value or "0").replace(",", ""))
    except ValueError:
        return 0.0
    return seconds if 0.0 <= seconds < 1e9 else 0.0
