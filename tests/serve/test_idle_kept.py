"""Idle money across a restart of `serve`, at the seam between the core's figures and the queue
store (runner/serve/idle_kept.py), on both stores: what one instance wrote seeds the next, the
figures shown after a restart are those shown before it, and nothing is counted twice."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from runner.core.idle_money import IdleMoney
from runner.serve.idle_kept import FLUSH_S, IdleKept
from runner.stores.queue import QueueError, QueueStore, open_queue

DAY = 20_000
T0 = DAY * 86_400.0 + 3_600.0  # 01:00 UTC on day DAY
GPU = "NVIDIA GeForce RTX 3090"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "queue.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def _start(store: QueueStore, instance: str, now: float) -> tuple[IdleMoney, IdleKept]:
    """What a serve start does: a fresh core's figures, seeded from the store."""
    money, kept = IdleMoney(), IdleKept(store, instance)
    kept.seed(money, now)
    return money, kept


def test_a_restart_shows_and_counts_the_idle_money_it_had(target: str) -> None:
    with closing(open_queue(target)) as store:
        money, kept = _start(store, "first", T0)
        money.add(GPU, 0.36, T0, T0 + 600)  # ten idle minutes, over
        assert kept.due(money, T0 + 600)
        kept.flush(money, money.by_day, T0 + 600)
        kept.flush(money, money.by_day, T0 + 601)  # written again: replaces, never adds
        before = kept.rows(money.by_day, T0 + 601)
        assert before == [(DAY, GPU, pytest.approx(0.06), 600.0)]

    with closing(open_queue(target)) as store:  # the restart
        money, kept = _start(store, "second", T0 + 700)
        assert kept.rows(money.by_day, T0 + 700) == before
        # The core holds the day's idle money again: what the idle budget counts.
        assert money.on_day(DAY) == pytest.approx(0.06)
        money.add(GPU, 0.36, T0 + 1000, T0 + 1300)  # five more minutes
        kept.flush(money, money.by_day, T0 + 1300)
        after = [(DAY, GPU, pytest.approx(0.09), 900.0)]
        assert kept.rows(money.by_day, T0 + 1300) == after

    with closing(open_queue(target)) as store:  # and again: each minute counted once
        money, kept = _start(store, "third", T0 + 2000)
        assert kept.rows(money.by_day, T0 + 2000) == after
        assert store.idle_money(0) == after


def test_a_stretch_going_on_is_written_once_a_minute_and_at_stop(target: str) -> None:
    with closing(open_queue(target)) as store:
        money, kept = _start(store, "one", T0)
        kept.flush(money, money.by_day, T0)
        assert not kept.due(money, T0 + FLUSH_S - 1)  # nothing ended, not a minute yet
        assert kept.due(money, T0 + FLUSH_S)
        going = IdleMoney()
        going.add(GPU, 0.36, T0, T0 + FLUSH_S)  # the core's figures with the stretch going on
        kept.flush(money, going.by_day, T0 + FLUSH_S)
        assert store.idle_money(0) == [(DAY, GPU, pytest.approx(0.006), FLUSH_S)]


class _Refusing:
    """A store whose disk is full for the first `refusals` writes."""

    def __init__(self, inner: QueueStore, refusals: int) -> None:
        self.inner, self.refusals = inner, refusals

    def record_idle(self, instance: str, rows: Sequence[tuple[int, str, float, float]]) -> None:
        if self.refusals:
            self.refusals -= 1
            raise QueueError("database or disk is full")
        self.inner.record_idle(instance, rows)

    def idle_money(self, since_day: int, besides: str = "") -> list[tuple[int, str, float, float]]:
        return self.inner.idle_money(since_day, besides)


def test_a_refused_write_is_made_again_at_the_next_flush(tmp_path: Path) -> None:
    with closing(open_queue(tmp_path / "queue.db")) as store:
        refusing = _Refusing(store, refusals=1)
        money, kept = IdleMoney(), IdleKept(refusing, "one")  # type: ignore[arg-type]
        kept.seed(money, T0)
        money.add(GPU, 0.36, T0, T0 + 600)
        kept.flush(money, money.by_day, T0 + 600)
        assert store.idle_money(0) == []
        assert kept.due(money, T0 + 601)  # the stretch that ended is still to be written
        kept.flush(money, money.by_day, T0 + 601)
        assert store.idle_money(0) == [(DAY, GPU, pytest.approx(0.06), 600.0)]


def test_other_instances_figures_are_read_as_the_store_has_them_now(tmp_path: Path) -> None:
    """On a shared queue another instance writes while this one runs."""
    with closing(open_queue(tmp_path / "queue.db")) as store:
        money, kept = _start(store, "one", T0)
        store.record_idle("two", [(DAY, GPU, 0.5, 5000.0)])
        money.add(GPU, 0.36, T0, T0 + 600)
        assert kept.rows(money.by_day, T0 + 600) == [(DAY, GPU, pytest.approx(0.56), 5600.0)]
