"""serve's warmth flags: what they read into, and the usage errors (exit 2) with the fix."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from runner.core.warm_policy import WarmPool, Window
from runner.errors import UsageError
from runner.serve.warm_flags import parse_pool, warm_policy

WEEKDAYS = frozenset(range(5))


def test_a_pool_with_a_schedule() -> None:
    assert parse_pool("4090:1@Mon-Fri 08:00-20:00 UTC") == WarmPool(
        "4090", 1, Window(WEEKDAYS, 8 * 3600, 20 * 3600)
    )


@pytest.mark.parametrize(
    ("text", "pool"),
    [
        ("4090", WarmPool("4090", 1, None)),
        ("RTX 3090:3", WarmPool("RTX 3090", 3, None)),
        ("A100:2@22:00-06:00", WarmPool("A100", 2, Window(frozenset(range(7)), 79_200, 21_600))),
        ("4090@Sat,Sun 00:00-24:00 UTC", WarmPool("4090", 1, Window(frozenset({5, 6}), 0, 0))),
        (
            "4090@Fri-Mon 09:00-17:00 Z",
            WarmPool("4090", 1, Window(frozenset({4, 5, 6, 0}), 32_400, 61_200)),
        ),
    ],
)
def test_pools_as_written(text: str, pool: WarmPool) -> None:
    assert parse_pool(text) == pool


def test_keep_warm_and_idle_budget() -> None:
    policy = warm_policy(15, ["4090"], 2.5)
    assert policy.keep_warm_s == 900 and policy.idle_budget_usd == 2.5 and policy.active


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("4090:0", "whole number from 1"),
        ("4090:x", "whole number"),
        ("", "not a GPU type"),
        ("<b>:1", "not a GPU type"),
        ("4090@Mon-Fri 08:00-20:00 CET", "is not UTC"),
        ("4090@Funday 08:00-20:00 UTC", "not a day"),
        ("4090@Mon-Fri 8-20 UTC", "not a time range"),
        ("4090@Mon-Fri 25:00-26:00 UTC", "not a time of day"),
        ("4090@", "is not `[DAYS ]HH:MM-HH:MM UTC`"),
    ],
)
def test_a_malformed_warm_is_a_usage_error_with_the_fix(text: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        warm_policy(0, [text], None)
    assert said in str(caught.value) and caught.value.exit_code == 2
    assert caught.value.hint


@pytest.mark.parametrize("budget", [-1.0, math.nan, math.inf])
def test_a_negative_or_nan_idle_budget_is_a_usage_error(budget: float) -> None:
    with pytest.raises(UsageError, match="--idle-budget"):
        warm_policy(0, [], budget)


@pytest.mark.parametrize("minutes", [-5.0, math.nan])
def test_a_negative_keep_warm_is_a_usage_error(minutes: float) -> None:
    with pytest.raises(UsageError, match="--keep-warm"):
        warm_policy(minutes, [], None)


@pytest.mark.slow  # a process: the CLI, or serve and its jobs
def test_the_command_exits_2_naming_the_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runner", "serve", "--idle-budget", "nan"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--idle-budget" in done.stderr and "Traceback" not in done.stderr
