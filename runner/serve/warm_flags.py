"""`serve`'s warmth flags read into the core's `WarmPolicy`: `--keep-warm MINUTES`,
`--warm GPU[:N][@SCHEDULE]` (repeatable) and `--idle-budget USD`.

A schedule is `[DAYS ]HH:MM-HH:MM[ UTC]`: DAYS a range (`Mon-Fri`), a list (`Sat,Sun`), one day,
or `daily` (also what no DAYS means); times are UTC (an end at or before the start runs past
midnight). Anything else is a usage error (exit 2) that names the flag and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from runner.core.servers import ServerBook
from runner.core.warm_policy import WEEK_DAYS, WarmPolicy, WarmPool, Window
from runner.errors import UsageError

MAX_POOL_COUNT = 64
_EXAMPLE = "e.g. --warm '4090:1@Mon-Fri 08:00-20:00 UTC'"
_GPU = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}")
_TIMES = re.compile(r"(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})")
_DAY = {d.lower(): i for i, d in enumerate(WEEK_DAYS)}


def warm_policy(
    keep_warm_min: float, warm: Sequence[str], idle_budget_usd: float | None
) -> WarmPolicy:
    if not math.isfinite(keep_warm_min) or keep_warm_min < 0:
        raise UsageError(
            f"--keep-warm {keep_warm_min}: minutes must be a number >= 0",
            hint="e.g. --keep-warm 15 (0, the default: give servers back as soon as idle)",
        )
    if idle_budget_usd is not None and (not math.isfinite(idle_budget_usd) or idle_budget_usd < 0):
        raise UsageError(
            f"--idle-budget {idle_budget_usd}: USD a day must be a number >= 0",
            hint="e.g. --idle-budget 2.50 (what idle warm servers may cost per UTC day)",
        )
    pools = tuple(parse_pool(text) for text in warm)
    return WarmPolicy(keep_warm_min * 60.0, pools, idle_budget_usd)


def check_on_market(policy: WarmPolicy, book: ServerBook, backend: str) -> None:
    """Warmth needs servers to rent, and each pool's GPU on the market."""
    if not policy.active:
        return
    if not book.renting:
        raise UsageError(
            f"--keep-warm/--warm: backend {backend} rents nothing, so nothing is kept warm",
            hint="use --backend clore, or leave --keep-warm and --warm out",
        )
    for pool in policy.pools:
        if not book.offered(pool.gpu):
            raise UsageError(
                f"--warm {pool.text()}: no offer on the market has a GPU matching {pool.gpu!r}",
                hint="a GPU type `clore-run offers` lists (matched as a substring: 4090, A100)",
            )


def parse_pool(text: str) -> WarmPool:
    """`GPU[:N][@SCHEDULE]` -> a pool; UsageError naming the part that is wrong."""
    head, at, schedule = text.partition("@")
    gpu, colon, count_text = head.strip().partition(":")
    gpu = gpu.strip()
    if not _GPU.fullmatch(gpu):
        raise UsageError(
            f"--warm {text!r}: {gpu!r} is not a GPU type",
            hint=f"a GPU type as `clore-run offers --gpu` takes it, {_EXAMPLE}",
        )
    count = 1
    if colon:
        if not count_text.strip().isdigit() or not 1 <= int(count_text) <= MAX_POOL_COUNT:
            raise UsageError(
                f"--warm {text!r}: the count {count_text!r} is not a whole number "
                f"from 1 to {MAX_POOL_COUNT}",
                hint=_EXAMPLE,
            )
        count = int(count_text)
    window = parse_window(schedule, text) if at else None
    return WarmPool(gpu, count, window)


def parse_window(schedule: str, flag: str) -> Window:
    words = schedule.split()
    if words and words[-1].upper() in ("UTC", "Z"):
        words = words[:-1]
    elif words and not _TIMES.fullmatch(words[-1]):
        raise UsageError(
            f"--warm {flag!r}: the schedule's time zone {words[-1]!r} is not UTC",
            hint=f"write the times in UTC, {_EXAMPLE}",
        )
    if not words or len(words) > 2:
        raise UsageError(
            f"--warm {flag!r}: the schedule {schedule!r} is not `[DAYS ]HH:MM-HH:MM UTC`",
            hint=_EXAMPLE,
        )
    times = _TIMES.fullmatch(words[-1])
    if times is None:
        raise UsageError(
            f"--warm {flag!r}: {words[-1]!r} is not a time range HH:MM-HH:MM", hint=_EXAMPLE
        )
    h1, m1, h2, m2 = (int(g) for g in times.groups())
    if h1 > 24 or h2 > 24 or m1 > 59 or m2 > 59 or (h1 == 24 and m1) or (h2 == 24 and m2):
        raise UsageError(f"--warm {flag!r}: {words[-1]!r} is not a time of day", hint=_EXAMPLE)
    days = parse_days(words[0], flag) if len(words) == 2 else frozenset(range(7))
    return Window(days, h1 * 3600 + m1 * 60, (h2 * 3600 + m2 * 60) % 86_400)


def parse_days(text: str, flag: str) -> frozenset[int]:
    if text.lower() in ("daily", "*"):
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.partition("-")
        a, b = _DAY.get(first.strip().lower()[:3]), _DAY.get(last.strip().lower()[:3])
        if a is None or (dash and b is None) or len(first.strip()) < 3:
            raise UsageError(
                f"--warm {flag!r}: {part!r} is not a day or a range of days",
                hint=f"days as Mon Tue Wed Thu Fri Sat Sun, a range Mon-Fri, a list Sat,Sun "
                f"or daily; {_EXAMPLE}",
            )
        if not dash:
            days.add(a)
            continue
        assert b is not None
        day = a
        while True:  # a range may wrap past Sunday: Fri-Mon
            days.add(day)
            if day == b:
                break
            day = (day + 1) % 7
    return frozenset(days)
