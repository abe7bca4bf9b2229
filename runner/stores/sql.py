"""What the halves of a row store run their statements through, in sqlite3 and psycopg alike:
`Execute` runs one statement (written with `?` placeholders) and gives its `Cursor`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

Execute = Callable[[str, Sequence[Any]], "Cursor"]


class Cursor(Protocol):
    """What a statement gives back, in sqlite3 and psycopg alike."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...
