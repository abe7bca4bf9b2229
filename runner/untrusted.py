"""Text from a rented server (job output, test names, messages) on our console lines.

A job may print anything: `\\e]0;title\\a` would set the terminal's title, `\\e[2J` clear the
screen, a bare `\\r` overwrite our own prefix. On a console line every control character becomes
visible text instead (the log file keeps the raw bytes); tabs stay tabs.
"""

from __future__ import annotations

import re

# C0 controls but tab, DEL, and the C1 controls (U+0080..U+009F: CSI, OSC and others on their own).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f\x80-\x9f]")
_NAMES = {"\x1b": "\\e", "\r": "\\r", "\n": "\\n", "\x07": "\\a", "\x08": "\\b"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMES.get(char) or f"\\x{ord(char):02x}"


def console_text(text: str) -> str:
    """`text` with every control character spelled out (`\\e`, `\\r`, `\\x9b`), safe to print
    on a terminal: nothing in it moves the cursor, changes colours or starts a new line."""
    return _CONTROL.sub(_visible, text)
