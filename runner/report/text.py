"""Small text helpers shared by the reports: XML-safe text, log tails, secret redaction."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path

from runner import redact as redaction

# Characters XML 1.0 forbids: the complement of its `Char` production
# (#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]), written out as the
# few ranges it is, since compiling the negated class of the huge allowed ranges took 10 ms of
# every process's start. Lone surrogates are among them: they appear when job output that is
# not UTF-8 was decoded with `surrogateescape`. Even so the class took a third of a millisecond
# to compile, at every start, for the few texts that are not ASCII: ASCII text is held to its
# ASCII members, and the whole class compiles when such a text comes.
_ASCII_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


@functools.cache
def _xml_illegal() -> re.Pattern[str]:
    return re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# ANSI escape sequences (colours, cursor moves) that test runners print: noise outside a terminal.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def xml_safe(text: str) -> str:
    """Drop the characters an XML document cannot hold."""
    return (_ASCII_XML_ILLEGAL if text.isascii() else _xml_illegal()).sub("", text)


def escape_text(text: str) -> str:
    """Character data in XML, SVG or HTML: `&`, `<` and `>` escaped, as ElementTree,
    xml.sax.saxutils.escape and html.escape(quote=False) do, without their imports (xml.sax
    brings urllib, http and ssl; html an entity table) or ElementTree's generic writer. Each
    replacement only when needed: most texts have none of the three."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    return text


def clip(text: str, limit: int, marker: str = "…") -> str:
    """At most `limit` characters, marked when cut."""
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def tail_lines(path: Path | str, max_lines: int, max_bytes: int = 256 * 1024) -> list[str]:
    """The last lines of a (possibly huge, possibly non-UTF-8) log, [] when it is missing.

    Reads only the last `max_bytes` so a 1 GB log costs nothing. With plain descriptors: the
    reports read every job's log, and a file object per log cost more than reading it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, max_bytes), max(0, size - max_bytes))
    except OSError:
        return []
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    # One scan of the whole tail first: most logs have no escape or control character (an ANSI
    # sequence starts with one), and then there is nothing to clean line by line.
    lines = text.splitlines()
    if _CONTROL.search(text):
        lines = [clean_line(line) for line in lines]
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut in the middle
    return lines[-max_lines:] if max_lines > 0 else []


def clean_line(line: str) -> str:
    """A log line without ANSI sequences or control characters (tabs kept)."""
    return _CONTROL.sub("", _ANSI.sub("", line))


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """Known secrets replaced with `***` (runner.redact). Redact before cutting text short: a
    cut can leave a secret's head, which no longer matches."""
    return redaction.text(text, env)
