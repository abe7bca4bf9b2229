"""Idle money across restarts: the core counts what rented servers cost while they ran no job
(runner/core/idle_money.py), in memory; the queue store keeps it, so a restarted `serve`
shows the figures it had and its idle budget counts what today's idle servers cost already.

At start the store's figures (every instance's, this one's has none yet) seed the core. The
loop then writes this instance's own part (the core's figures less that seed) whenever an idle
stretch ends, at least every `FLUSH_S` while one goes on, and at stop with the stretches going
on counted to then. A write replaces this instance's row of each day and GPU, so a repeated or
late one never counts twice. A refused write is logged and made again at the next flush.

On a shared (PostgreSQL) queue other instances add rows while this one runs: the figures shown
are theirs as the store has them now, plus this instance's own. A kill -9 loses at most what
went on since the last write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from runner.core.idle_money import KEEP_DAYS, IdleFigure, IdleMoney
from runner.core.warm_policy import DAY_S
from runner.stores.queue import QueueError, QueueStore

log = logging.getLogger("clore_run.serve")

FLUSH_S = 60.0  # a stretch going on is written at least this often (what a kill -9 may lose)

Figures = Mapping[tuple[int, str], IdleFigure]
Row = tuple[int, str, float, float]  # UTC day number, GPU model, USD, seconds


class IdleKept:
    """One instance's idle money in the queue store. Loop thread, but `rows` (any thread)."""

    def __init__(self, store: QueueStore, instance: str) -> None:
        self.store = store
        self.instance = instance
        self._seed: dict[tuple[int, str], IdleFigure] = {}
        self._written: dict[tuple[int, str], tuple[float, float]] = {}
        self._over_s = -1.0  # the seconds of the stretches over at the last write
        self._flushed_at = -float("inf")

    def seed(self, money: IdleMoney, now: float) -> None:
        """Put what the store holds for the days kept into the core's figures (at start)."""
        for day, gpu, usd, seconds in self.store.idle_money(_first_day(now), self.instance):
            self._seed[(day, gpu)] = IdleFigure(usd, seconds)
            figure = money.by_day.setdefault((day, gpu), IdleFigure())
            figure.usd += usd
            figure.seconds += seconds
        self._over_s = _seconds(money.by_day)

    def due(self, money: IdleMoney, now: float) -> bool:
        """Is a write due: a stretch ended since the last, or one may go on for FLUSH_S?"""
        return _seconds(money.by_day) != self._over_s or now - self._flushed_at >= FLUSH_S

    def flush(self, money: IdleMoney, figures: Figures, now: float) -> None:
        """Write this instance's part of `figures` (the core's, going-on stretches included),
        the rows that changed since the last write."""
        self._flushed_at = now
        over_s = _seconds(money.by_day)
        rows = [r for r in self._own(figures) if self._written.get((r[0], r[1])) != r[2:]]
        if rows:
            try:
                self.store.record_idle(self.instance, rows)
            except QueueError as exc:
                log.warning("idle money not recorded (tried again later): %s", exc)
                return
            self._written.update({(d, g): (u, s) for d, g, u, s in rows})
        self._over_s = over_s

    def rows(self, figures: Figures, now: float) -> list[Row]:
        """Idle money to show, oldest first: the other instances' as the store has it now (a
        restart's predecessors included), plus this instance's own part of `figures`."""
        try:
            others = self.store.idle_money(_first_day(now), self.instance)
        except QueueError as exc:  # the core's figures still hold the seed: shown as they are
            log.warning("idle money of other instances not read: %s", exc)
            others = [(d, g, f.usd, f.seconds) for (d, g), f in self._seed.items()]
        total: dict[tuple[int, str], list[float]] = {}
        for day, gpu, usd, seconds in [*others, *self._own(figures)]:
            figure = total.setdefault((day, gpu), [0.0, 0.0])
            figure[0] += usd
            figure[1] += seconds
        return [(d, g, u, s) for (d, g), (u, s) in sorted(total.items())]

    def _own(self, figures: Figures) -> list[Row]:
        out = []
        for (day, gpu), figure in sorted(figures.items()):
            seed = self._seed.get((day, gpu), IdleFigure())
            usd, seconds = figure.usd - seed.usd, figure.seconds - seed.seconds
            if seconds > 0 or usd > 0:
                out.append((day, gpu, max(0.0, usd), max(0.0, seconds)))
        return out


def _first_day(now: float) -> int:
    return int(now // DAY_S) - KEEP_DAYS


def _seconds(figures: Figures) -> float:
    return sum(f.seconds for f in figures.values())
