"""Located errors in a pipeline file: `FILE:LINE:COL: key.path: what is wrong (hint)`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.core.model import SpecWarning
from runner.errors import did_you_mean as did_you_mean  # its callers in spec import it here

KeyPath = tuple[str | int, ...]


def format_path(path: KeyPath) -> str:
    """`("jobs", "test", "needs", 0)` -> `jobs.test.needs[0]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a pipeline file."""

    file: str
    line: int
    column: int
    path: KeyPath
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        key = format_path(self.path)
        text = f"{where}: {key}: {self.message}" if key else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class SpecError(UsageError):
    """One or more problems in a pipeline file, reported together in file order."""

    def __init__(
        self, diagnostics: Sequence[Diagnostic], warnings: Sequence[SpecWarning] = ()
    ) -> None:
        """`warnings`: said among the problems, in file order (a YAML 1.1 surprise is often
        what caused one)."""
        ordered = sorted(diagnostics, key=lambda d: (d.file, d.line, d.column))
        lines = [((d.file, d.line, d.column), str(d)) for d in ordered]
        lines += [((w.location.file, w.location.line, w.location.column), str(w)) for w in warnings]
        lines.sort(key=lambda pair: pair[0])
        super().__init__("\n".join(text for _, text in lines))
        self.diagnostics = tuple(ordered)
        self.warnings = tuple(warnings)
