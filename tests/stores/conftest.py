"""Both store implementations, for the contract tests that every one of them must pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.stores.ledger import RentalLedger, open_ledger
from tests.pg_fixture import PgCluster


class Tick:
    """A unix clock that moves one second per reading."""

    def __init__(self, start: float = 1_783_700_000.0) -> None:
        self.t = start

    def time(self) -> float:
        self.t += 1
        return self.t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


# PostgreSQL is a cluster of processes (tests/pg_fixture.py): those cases are in the slow lane.
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store (a ledger, a queue) lives: a SQLite file, or a fresh PostgreSQL database;
    a test taking it runs on both."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.new_database()


@pytest.fixture
def any_ledger(store_target: str) -> Iterator[RentalLedger]:
    target = store_target if store_target.startswith("postgresql:") else Path(store_target)
    with open_ledger(target, clock=Tick()) as ledger:
        yield ledger
