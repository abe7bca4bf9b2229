"""Text from a machine we do not control, made harmless for the place it is shown.

Everything a rented server sends — output, file and test names, error text, its GPU name — may
be hostile. Two places read more into text than a person sees:
- the GitHub Actions runner reads workflow commands in its log: `::name::value` (at the start of
  a line, leading spaces allowed) and the older `##[name]value` (anywhere in a line). A command
  from a server could mask values, add annotations or stop command processing;
- a terminal obeys control sequences: colours, but also cursor moves that overwrite lines,
  window titles, and (OSC 52) the clipboard.
`console_line()` makes remote text one safe console line; `markdown()` one safe Markdown cell.
"""

from __future__ import annotations

import functools
import re

# What breaks a command's pattern without changing what a person reads: a zero-width space is
# not whitespace to the runner (so `::` after it is not at a line's start) and it splits `##[`.
_BREAK = "\u200b"
_COMMAND = re.compile(r"::|##\[")
# Complete ANSI sequences: CSI (colours, cursor), OSC (titles, clipboard) ended by BEL or ST,
# and the two-character ones. They are dropped: on a console line they are noise or an attack.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# Everything that ends a line for some reader (Python, terminals, the runner's \r), and the
# left-over controls (a lone ESC, C1 codes) and bidirectional overrides that can make a line
# read in another order than it runs (shown as visible escapes). A class reaching past Latin-1
# took a third of a millisecond to compile, at every start: ASCII text (most lines) is held to
# the classes' ASCII members, and the full patterns compile when a line that is not comes.
_ASCII_LINE_BREAKS = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e]")
_ASCII_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f]")


@functools.cache
def _full_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(line breaks, controls) for any text."""
    return (
        re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"),
        re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"),
    )


def console_line(text: str) -> str:
    """`text` as one console line that neither a terminal nor the Actions runner can act on."""
    text = _ANSI.sub("", text)
    breaks, controls = (_ASCII_LINE_BREAKS, _ASCII_CONTROLS) if text.isascii() else _full_patterns()
    text = breaks.sub(" ", text)
    text = controls.sub(_visible, text)
    return _COMMAND.sub(_broken, text)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _broken(match: re.Match[str]) -> str:
    token = match.group()
    return token[0] + _BREAK + token[1:]


# Markdown that a server's text could use to make links, images, HTML, mentions or structure.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def markdown(text: str, limit: int = 200) -> str:
    """Remote text as inert Markdown for a table cell or list item: one line, every character
    that Markdown or GitHub's rendering gives a meaning escaped (links, images, emphasis, HTML,
    pipes, @mentions, #references), cut to `limit` characters."""
    text = " ".join(console_line(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    # GitHub links @user, #123, bare URLs and www. names from the rendered text itself: a
    # backslash does not stop that, a zero-width space inside the pattern does.
    return _AUTOLINK.sub(lambda m: m.group(1) + _BREAK, text)


_AUTOLINK = re.compile(r"([@#](?=\w)|:(?=//)|(?i:www)(?=\\?\.))")


# What no file name we write may hold: controls (newline, ESC, DEL, C1), line and paragraph
# separators and bidirectional overrides. Such a name breaks the tools that read the folder
# (upload-artifact refuses a path with a newline; a terminal listing it obeys the ESC) and can
# make a listing read differently from what is on disk.
_NAME_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def unsafe_file_name(name: str) -> bool:
    """True when `name` (a path or one part of it) holds a character no artifact's name may."""
    return _NAME_UNSAFE.search(name) is not None


# The same sequences, and the control characters a terminal acts on (tab and newline kept), in
# a log's raw bytes: cleaned as bytes, a UTF-8 character cut at a chunk's edge stays whole.
_ANSI_BYTES = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def log_bytes(chunk: bytes) -> bytes:
    """A log's bytes as a person should read them in a page: escape sequences and control
    characters out (`clore-run logs` shows no tofu either), a line redrawn with `\\r` (a
    progress bar) at its latest state. Bytes with none of them come back as they are."""
    if not _CONTROL_BYTES.search(chunk) and b"\r" not in chunk:
        return chunk
    lines = chunk.split(b"\n")
    for i, line in enumerate(lines):
        if b"\r" in line:
            drawn = [part for part in line.split(b"\r") if part.strip()]
            line = drawn[-1] if drawn else b""
        lines[i] = _CONTROL_BYTES.sub(b"", _ANSI_BYTES.sub(b"", line))
    return b"\n".join(lines)
