"""Idle money in the queue store, both halves: each instance's totals by (UTC day, GPU model),
overwritten by that instance (a write repeated lands once), summed over instances when read;
and a queue written before the table existed opens with its jobs kept and no idle money."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from runner.stores.queue import open_queue
from runner.stores.queue import postgres as pg_half
from runner.stores.queue import sqlite as sqlite_half
from tests.stores.queue.old_queues import queue_from_before


def test_an_instances_totals_replace_its_last_and_sum_over_instances(store_target: str) -> None:
    with closing(open_queue(store_target)) as store:
        assert store.idle_money(0) == []
        store.record_idle("one", [(20_000, "RTX 4090", 0.25, 1800.0)])
        store.record_idle("one", [(20_000, "RTX 4090", 0.5, 3600.0), (20_001, "A100", 1.0, 60.0)])
        store.record_idle("one", [(20_001, "A100", 1.0, 60.0)])  # the same write again
        store.record_idle("two", [(20_000, "RTX 4090", 0.125, 900.0)])
        assert store.idle_money(0) == [
            (20_000, "RTX 4090", 0.625, 4500.0),
            (20_001, "A100", 1.0, 60.0),
        ]
        assert store.idle_money(20_001) == [(20_001, "A100", 1.0, 60.0)]
        assert store.idle_money(0, besides="one") == [(20_000, "RTX 4090", 0.125, 900.0)]
    with closing(open_queue(store_target)) as reopened:  # a restart reads what was written
        assert reopened.idle_money(20_000, besides="three")[0] == (
            20_000, "RTX 4090", 0.625, 4500.0,
        )  # fmt: skip


def test_a_queue_from_before_idle_money_keeps_its_jobs(store_target: str) -> None:
    queue_from_before(store_target, sqlite_steps=4, pg_steps=5, trust="team-a")
    with closing(open_queue(store_target)) as store:
        (old,) = store.unsettled()
        assert (old.job.id, old.row.trust) == ("s1.a", "team-a")
        assert store.idle_money(0) == []
        store.record_idle("one", [(20_000, "RTX 3090", 0.1, 360.0)])
        assert store.idle_money(0) == [(20_000, "RTX 3090", 0.1, 360.0)]


def test_the_migrations_are_numbered_one_per_version() -> None:
    assert len(sqlite_half.MIGRATIONS) == sqlite_half.SCHEMA_VERSION == 5
    assert "idle_money" in sqlite_half.MIGRATIONS[4][0]
    assert "queue_idle_money" in pg_half.MIGRATIONS[5][0]


@pytest.mark.parametrize("besides", ["", "one"])
def test_nothing_recorded_reads_nothing(tmp_path: Path, besides: str) -> None:
    with closing(open_queue(tmp_path / "q.db")) as store:
        store.record_idle("one", [])
        assert store.idle_money(0, besides) == []
