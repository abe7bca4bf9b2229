"""The pipeline models' own conversions, run before pydantic's type checks.
The loader uses `iso_time` too, on values it reads before the models do.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any


def one_or_many(value: Any) -> Any:
    """`needs: build` is `needs: [build]`."""
    return [value] if isinstance(value, str) else value


def scalar_strings(value: Any) -> Any:
    """Env values may be written as numbers or booleans; the process sees strings."""
    if not isinstance(value, dict):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, (int, float)) and _finite(item):
            out[key] = str(item)
        else:
            out[key] = item
    return out


def _finite(number: float) -> bool:
    """A number the schema takes (a finite float). .nan, 1e999 and an integer past a float's
    range are left as numbers, so that the model refuses them as the schema does: no string
    to export for the first two, and the schema's numbers end at a float's range."""
    return -sys.float_info.max <= number <= sys.float_info.max  # False for NaN; exact for ints


def iso_time(value: Any) -> Any:
    """An ISO-8601 string as a datetime (`Z` included); anything else as it is."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # left for the type check to reject with its own message
    return value


def whole_number(value: Any) -> Any:
    """`retries: 2.0` is 2: JSON Schema's integers include 2.0, and so do the models'."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
