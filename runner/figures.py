"""How figures read wherever a person reads them (the console, the live view, the reports):
money, hourly rates, durations, percentages, statuses. "–" for a figure that is not there."""

from __future__ import annotations

from runner import outcome


def money(value: object) -> str:
    """$0.0124, $12.50: below $10 four decimals, so fractions of a cent of GPU time show."""
    if not isinstance(value, (int, float)):
        return "–"
    if value == 0:
        return "$0.00"
    return f"${value:.4f}" if abs(value) < 10 else f"${value:.2f}"


def rate(value: object) -> str:
    """An hourly price: $0.72, $0.045 (three decimals below ten cents)."""
    if not isinstance(value, (int, float)):
        return "–"
    return f"${value:.3f}" if abs(value) < 0.1 else f"${value:.2f}"


def human(status: object) -> str:
    """`timed_out` -> `timed out` (runner.outcome words every status)."""
    return outcome.status_words(status)


def counted(status: object) -> str:
    """A status after a count: `2 errored`, not `2 error` (the others read as they are)."""
    return outcome.counted(status)


def duration(value: object) -> str:
    """12.3s, 4m 05s, 2h 03m."""
    if not isinstance(value, (int, float)):
        return "–"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def pct(value: object) -> str:
    """+38%, -5%, ±0%; "new" when there was nothing to compare with."""
    if not isinstance(value, (int, float)):
        return "new"
    if round(value) == 0:
        return "±0%"
    return f"{value:+.0f}%"


def format_duration(seconds: float) -> str:
    """The plan's compact form: 45s, 4m, 4m05s, 2h03m."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    return f"{secs}s"
