"""`${{ ... }}` expressions: the small subset clore-run supports.

Supported: `${{ matrix.KEY }}` and `${{ env.NAME }}` (NAME from the caller's environment). `if:`
takes `success()`, `failure()` or `always()`, bare or wrapped in `${{ }}`. Anything else is an
error, because an expression silently left as text would run the wrong thing on a paid server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.model import Condition

_OPEN = "${{"
_CLOSE = "}}"
_REFERENCE = re.compile(r"^\s*(matrix|env)\.([A-Za-z_][A-Za-z0-9_-]*)\s*$")
_CONDITIONS = {c.value: c for c in Condition}


class ExpressionError(ValueError):
    """A bad expression; the message is written for the user, `hint` says how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Contexts:
    """Values expressions may read."""

    matrix: Mapping[str, Any]
    env: Mapping[str, str]
    in_matrix_job: bool = False


def _split(text: str) -> list[tuple[bool, str]]:
    """Split into (is_expression, text) pieces; raise on an unclosed `${{`."""
    pieces: list[tuple[bool, str]] = []
    rest = text
    while _OPEN in rest:
        before, _, after = rest.partition(_OPEN)
        inner, closed, rest = after.partition(_CLOSE)
        if not closed:
            raise ExpressionError("unclosed '${{'", "end the expression with '}}'")
        pieces += [(False, before), (True, inner)]
    pieces.append((False, rest))
    return pieces


def _resolve(inner: str, ctx: Contexts) -> Any:
    match = _REFERENCE.match(inner)
    if not match:
        shown = inner.strip() or "(empty)"
        raise ExpressionError(
            f"unsupported expression '${{{{ {shown} }}}}'",
            "use ${{ matrix.KEY }} or ${{ env.NAME }}",
        )
    context, name = match.groups()
    if context == "matrix":
        if name not in ctx.matrix:
            known = ", ".join(sorted(ctx.matrix)) or "none: this job has no matrix"
            raise ExpressionError(f"unknown matrix key '{name}'", f"matrix keys: {known}")
        return ctx.matrix[name]
    if name not in ctx.env:
        raise ExpressionError(
            f"environment variable '{name}' is not set", f"export {name} before running"
        )
    return ctx.env[name]


def substitute(text: str, ctx: Contexts) -> Any:
    """Replace expressions in `text`. A value that is one whole expression keeps its type."""
    if _OPEN not in text:
        return text
    pieces = _split(text)
    if len(pieces) == 3 and pieces[0][1] == "" and pieces[2][1] == "":
        return _resolve(pieces[1][1], ctx)
    return "".join(_scalar_text(_resolve(p, ctx)) if is_expr else p for is_expr, p in pieces)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_condition(text: str) -> Condition:
    """An `if:` value -> Condition."""
    body = text.strip()
    if body.startswith(_OPEN) and body.endswith(_CLOSE):
        body = body[len(_OPEN) : -len(_CLOSE)].strip()
    if body in _CONDITIONS:
        return _CONDITIONS[body]
    raise ExpressionError(
        f"unknown if: expression '{text}'", "use success(), failure() or always()"
    )
