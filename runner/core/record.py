"""The equality, hash and text the core's frozen dataclasses share.

dataclass writes and compiles an `__eq__`, a `__hash__` and a `__repr__` for every class it makes,
one exec each, while the module is imported: for the three dozen records `clore-run run` loads,
~4 ms of every start. A record is `@dataclass(frozen=True, eq=False, repr=False)` on this base
instead, and answers as the generated methods do: equal to a record of the same class whose
fields are equal in order (anything else: NotImplemented), the hash of those fields, and
`Name(field=value, ...)`. Only for frozen classes: a hash of fields that change would be wrong.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any


class Record:
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _values(self) == _values(other)

    def __hash__(self) -> int:
        return hash(_values(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _names(type(self)))
        return f"{type(self).__qualname__}({shown})"


def _values(record: Record) -> tuple[Any, ...]:
    return tuple(getattr(record, name) for name in _names(type(record)))


_NAMES: dict[type, tuple[str, ...]] = {}  # each record class's field names, in order


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(field.name for field in dataclasses.fields(cls))
    return names
