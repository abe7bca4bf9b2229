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

    @property
    def errors(self) -> tuple[ExpressionError, ...]:
        return (self,)


class ExpressionErrors(ExpressionError):
    """Every bad expression of one value, so a fix-and-rerun loop is not one per expression."""

    def __init__(self, errors: list[ExpressionError]) -> None:
        super().__init__(str(errors[0]), errors[0].hint)
        self._errors = tuple(errors)

    @property
    def errors(self) -> tuple[ExpressionError, ...]:
        return self._errors


@dataclass(frozen=True)
class Contexts:
    """Values expressions may read."""

    matrix: Mapping[str, Any]
    env: Mapping[str, str]
    in_matrix_job: bool = False


def _split(text: str) -> tuple[list[tuple[bool, str]], ExpressionError | None]:
    """Split into (is_expression, text) pieces, up to an unclosed `${{` (then its error)."""
    pieces: list[tuple[bool, str]] = []
    rest = text
    while _OPEN in rest:
        before, _, after = rest.partition(_OPEN)
        inner, closed, tail = after.partition(_CLOSE)
        if not closed:
            pieces.append((False, before))
            return pieces, ExpressionError("unclosed '${{'", "end the expression with '}}'")
        pieces += [(False, before), (True, inner)]
        rest = tail
    pieces.append((False, rest))
    return pieces, None


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
    pieces, unclosed = _split(text)
    errors: list[ExpressionError] = []
    values: list[Any] = []
    for is_expr, piece in pieces:
        try:
            values.append(_resolve(piece, ctx) if is_expr else piece)
        except ExpressionError as exc:
            errors.append(exc)
    errors += [unclosed] if unclosed is not None else []
    if errors:
        raise errors[0] if len(errors) == 1 else ExpressionErrors(errors)
    if len(pieces) == 3 and pieces[0][1] == "" and pieces[2][1] == "":
        return values[1]
    pairs = zip(pieces, values, strict=True)
    return "".join(_scalar_text(v) if is_expr else v for (is_expr, _), v in pairs)


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
