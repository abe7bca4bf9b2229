"""Idle money, pure: what rented servers cost while they ran no job, per UTC day and GPU type.

A rented server is idle from the moment its last job ended (or it came up with none), and a
server rented for warmth from its create, until a job starts on it or it is given back. Its
idle time is money of its own: a job's cost is its own time on the server, and the idle time
between jobs is nobody's job's. Figures are kept for the last `KEEP_DAYS` days.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.warm_policy import DAY_S

KEEP_DAYS = 31


@dataclass(slots=True)
class IdleFigure:
    usd: float = 0.0
    seconds: float = 0.0


class IdleMoney:
    """Idle seconds and USD, by (UTC day, GPU model)."""

    def __init__(self) -> None:
        self.by_day: dict[tuple[int, str], IdleFigure] = {}

    def add(self, gpu_model: str, usd_per_hour: float, since: float, until: float) -> None:
        """An idle stretch of a server at `usd_per_hour`, split at UTC midnights."""
        at = since
        while at < until:
            day = int(at // DAY_S)
            end = min(until, (day + 1) * DAY_S)
            figure = self.by_day.setdefault((day, gpu_model), IdleFigure())
            figure.seconds += end - at
            figure.usd += usd_per_hour * (end - at) / 3600.0
            at = end
        if len(self.by_day) > 4 * KEEP_DAYS:
            newest = max(d for d, _ in self.by_day)
            self.by_day = {k: v for k, v in self.by_day.items() if k[0] > newest - KEEP_DAYS}

    def on_day(self, day: int) -> float:
        return sum(f.usd for (d, _), f in self.by_day.items() if d == day)
