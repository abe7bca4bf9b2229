"""Job output cut into console lines, with `\\r` redraws (progress bars) understood.

A terminal shows a `\\r`-redrawn line as its latest state; so do we: `feed` returns the lines
that are complete and the state of the line still being drawn, which the live view shows in
the job's row until the line ends. A finished line keeps only its last redraw.
"""

from __future__ import annotations

from runner.untrusted import console_line

MAX_PENDING = 64 * 1024  # a "line" that never ends is shown in pieces, not kept forever


class LineBuffer:
    """The unfinished line of one stream of one job."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> tuple[list[str], str]:
        """(complete lines, the current state of the unfinished one), both safe to print."""
        buffered = self._pending + data
        *complete, rest = buffered.split(b"\n")
        if len(rest) > MAX_PENDING:
            complete.append(rest)
            rest = b""
        self._pending = rest
        return [_latest(line) for line in complete], _latest(rest)

    def flush(self) -> str | None:
        """The unfinished line as a last line, or None."""
        rest, self._pending = self._pending, b""
        text = _latest(rest)
        return text if text else None


def _latest(line: bytes) -> str:
    """What a terminal would show of a line drawn with `\\r`s: its last non-empty drawing."""
    text = line.decode("utf-8", "replace").rstrip("\r")
    drawn = [part for part in text.split("\r") if part.strip()]
    return console_line(drawn[-1].strip() if drawn else "")
