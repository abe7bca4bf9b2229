"""`strategy.matrix` expansion with GitHub Actions semantics (product, exclude, include)."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

Combination = dict[str, Any]
_SCALARS = (str, int, float, bool)
# GitHub Actions' own cap: a matrix may generate at most 256 jobs per workflow run job. Counted
# before anything is built: a few hundred bytes of aliased YAML lists can multiply to 10^8.
MAX_COMBINATIONS = 256


class MatrixError(ValueError):
    def __init__(self, message: str, key: str | int | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.hint = hint


def expand(matrix: Mapping[str, Any]) -> list[Combination]:
    """All combinations, in the order GitHub Actions lists them."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    for key, values in axes.items():
        if not isinstance(values, list):
            raise MatrixError("a matrix key needs a list of values", key, f"{key}: [a, b]")
        if not values:
            raise MatrixError("empty list of values", key, "give at least one value")
        if not all(_scalar(v) for v in values):
            raise MatrixError("matrix values must be strings, numbers or booleans", key)
    include = _once(_entries(matrix.get("include", []), "include"))
    exclude = _entries(matrix.get("exclude", []), "exclude")
    _check_size(axes, len(include))
    combos = (
        [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
        if axes
        else []
    )
    combos = [c for c in combos if not any(_matches(c, e) for e in exclude)]
    combos = _apply_include(combos, include, frozenset(axes))
    if len(combos) > MAX_COMBINATIONS:  # what `include` added beyond the product
        raise MatrixError(
            f"the matrix makes {len(combos)} combinations; at most {MAX_COMBINATIONS}",
            "include",
            "split the job, or use fewer `include` entries",
        )
    if not combos:
        raise MatrixError("the matrix has no combinations", None, "check `exclude` and the values")
    return combos


def _check_size(axes: Mapping[str, list[Any]], includes: int) -> None:
    """Refuse a matrix whose product (before `exclude`) or whose `include` list alone passes
    the cap, computed from the list lengths without building a combination."""
    product = 1
    for values in axes.values():
        product *= len(values)
        if product > MAX_COMBINATIONS:
            break
    for count, what in ((product, "the product of its values"), (includes, "its `include`")):
        if count > MAX_COMBINATIONS:
            raise MatrixError(
                f"the matrix makes more than {MAX_COMBINATIONS} combinations ({what}); "
                f"a job's matrix may make at most {MAX_COMBINATIONS}, as in GitHub Actions",
                None,
                "split the job, or use fewer values per key",
            )


def _entries(value: Any, key: str) -> list[Combination]:
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise MatrixError(f"`{key}` must be a list of mappings", key)
    for entry in value:
        if not all(_scalar(v) for v in entry.values()):
            raise MatrixError("matrix values must be strings, numbers or booleans", key)
        if key == "exclude" and not entry:
            raise MatrixError("an empty `exclude` entry excludes every combination", key)
    return [dict(e) for e in value]


def _once(entries: list[Combination]) -> list[Combination]:
    """Entries written twice are one: a second copy changes nothing, or makes a job twice."""
    seen: set[tuple[tuple[str, str, str], ...]] = set()
    out = []
    for entry in entries:
        key = tuple((str(k), type(v).__name__, repr(v)) for k, v in entry.items())
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def _scalar(value: Any) -> bool:
    """A string, a boolean or a finite number (`.nan` and `.inf` name no job)."""
    return isinstance(value, _SCALARS) and (not isinstance(value, float) or math.isfinite(value))


def _matches(combo: Combination, entry: Combination) -> bool:
    return all(k in combo and _same(combo[k], v) for k, v in entry.items())


def _same(a: Any, b: Any) -> bool:
    """Python's True == 1: a matrix value `true` is not the number 1."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _apply_include(
    combos: list[Combination], include: list[Combination], original: frozenset[str]
) -> list[Combination]:
    """Add each include entry to every combination whose original values it does not change;
    when it fits none, it becomes a combination of its own. Only the original combinations are
    candidates: an entry never merges into one that an earlier include added."""
    base = [dict(c) for c in combos]
    out = [dict(c) for c in combos]
    for entry in include:
        fitted = False
        for plain, combo in zip(base, out[: len(base)], strict=True):
            if all(_same(plain[k], v) for k, v in entry.items() if k in original):
                combo.update(entry)
                fitted = True
        if not fitted:
            out.append(dict(entry))
    return out


def instance_suffix(combo: Combination) -> str:
    """A filesystem-safe, readable suffix: {gpu: "RTX 3090", py: 3.11} -> "rtx-3090-3.11"."""
    parts = [_slug(_text(v)) for v in combo.values()]
    return "-".join(p for p in parts if p)


def instance_label(combo: Combination) -> str:
    return ", ".join(_text(v) for v in combo.values())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _slug(text: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9._]+", "-", text.lower())).strip("-.")
