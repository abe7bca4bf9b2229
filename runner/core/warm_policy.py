"""What `serve` is told to keep warm, as plain data, and the weekly windows of it, pure.

- `keep_warm_s`: a rented server whose job ended is kept up to this long after it for the
  next job that fits it (0: given back as soon as no job wants it, as a run does);
- `pools`: during its window, at least `count` idle servers of a GPU type are held, rented
  for warmth when fewer are;
- `idle_budget_usd`: what idle servers may cost a UTC day; a keep or a rental for warmth must
  fit it first, and none is made past it.

A domain whose name starts with `fork-pr-` (what a pull request from a fork is given,
runner/spec/trust.py) is untrusted: its servers are never kept warm. Times are Unix seconds
passed in by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_S = 86_400
WEEK_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
UNTRUSTED_PREFIX = "fork-pr-"  # runner/spec/trust.py names a fork's pull request so


def untrusted(domain: str) -> bool:
    """A fork's pull request: code nobody trusted wrote it, so nothing of it is kept."""
    return domain.startswith(UNTRUSTED_PREFIX)


def weekday(now: float) -> int:
    """0 Monday .. 6 Sunday, UTC (1970-01-01 was a Thursday)."""
    return (int(now // DAY_S) + 3) % 7


@dataclass(frozen=True)
class Window:
    """A weekly window in UTC: on `days` (0 Monday) from `start_s` to `end_s` seconds after
    midnight. An end at or before the start runs past midnight into the next day."""

    days: frozenset[int]
    start_s: int
    end_s: int

    def covers(self, now: float) -> bool:
        day = int(now // DAY_S)
        t = now - day * DAY_S
        today, yesterday = weekday(now), (weekday(now) - 1) % 7
        if self.end_s > self.start_s:
            return today in self.days and self.start_s <= t < self.end_s
        # Past midnight: the evening of a listed day, or the morning after one.
        return (today in self.days and t >= self.start_s) or (
            yesterday in self.days and t < self.end_s
        )

    def next_change(self, now: float) -> float:
        """The first start or end of the window after `now` (within the next eight days)."""
        first_day = int(now // DAY_S)
        best = now + 8 * DAY_S
        for offset in range(-1, 8):
            day = first_day + offset
            if (day + 3) % 7 not in self.days:
                continue
            start = day * DAY_S + self.start_s
            end = day * DAY_S + self.end_s + (0 if self.end_s > self.start_s else DAY_S)
            for edge in (start, end):
                if now < edge < best:
                    best = edge
        return float(best)

    def text(self) -> str:
        return f"{_days_text(self.days)} {_hhmm(self.start_s)}-{_hhmm(self.end_s)} UTC"


def _days_text(days: frozenset[int]) -> str:
    """`Mon-Fri`, `Sat,Sun`, `daily`: runs of three days or more as a range."""
    if len(days) == 7:
        return "daily"
    runs: list[list[int]] = []
    for day in sorted(days):
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    words = [
        f"{WEEK_DAYS[r[0]]}-{WEEK_DAYS[r[-1]]}" if len(r) > 2 else ",".join(WEEK_DAYS[d] for d in r)
        for r in runs
    ]
    return ",".join(words)


def _hhmm(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


@dataclass(frozen=True)
class WarmPool:
    """At least `count` idle servers whose GPU model contains `gpu` (as a job's `gpu.type`
    matches), during `window` (None: always)."""

    gpu: str
    count: int = 1
    window: Window | None = None

    def matches(self, gpu_model: str) -> bool:
        return self.gpu.lower() in gpu_model.lower()

    def on(self, now: float) -> bool:
        return self.window is None or self.window.covers(now)

    def text(self) -> str:
        when = f"@{self.window.text()}" if self.window is not None else ""
        return f"{self.gpu}:{self.count}{when}"


@dataclass(frozen=True)
class WarmPolicy:
    keep_warm_s: float = 0.0
    pools: tuple[WarmPool, ...] = ()
    idle_budget_usd: float | None = None  # a UTC day's idle money (None: no limit)

    @property
    def active(self) -> bool:
        return self.keep_warm_s > 0 or bool(self.pools)


COLD = WarmPolicy()  # as a run does: nothing kept for warmth
