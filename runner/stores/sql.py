"""What a row store's rules are written over, in sqlite3 and psycopg alike.

A store's rows and rules (ledger/rows.py, hosts/rows.py) are written once as a `RowStore`:
statements with `?` placeholders, run as one unit through `_transact`. Each half gives only
that, what its messages call it (`where`) and `close`, and it gives them once for every store:
`SqliteRows` (runner/stores/sqlite.py) and `PgRows` (runner/stores/pg.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from runner.clock import Clock

Execute = Callable[[str, Sequence[Any]], "Cursor"]
T = TypeVar("T")
_S = TypeVar("_S", bound="RowStore")


class Cursor(Protocol):
    """What a statement gives back, in sqlite3 and psycopg alike."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class RowStore:
    """A store's rules over `_transact` (statements with `?` placeholders, run as one unit, its
    failures turned into the store's error); a half gives it, `where` and `close`."""

    _clock: Clock

    @property
    def where(self) -> str:
        raise NotImplementedError

    def _transact(self, doing: str, work: Callable[[Execute], T]) -> T:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
