"""hold_lock: one holder at a time, and the caller's words when it cannot be taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import UsageError
from runner.file_lock import hold_lock

TAKEN = UsageError("taken", "wait")


def cannot(exc: OSError) -> UsageError:
    return UsageError(f"cannot write ({exc.strerror})")


def test_a_second_holder_is_refused_until_the_first_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "x.lock"
    first = hold_lock(path, cannot, TAKEN)
    with pytest.raises(UsageError) as caught:
        hold_lock(path, cannot, TAKEN)
    assert caught.value is TAKEN
    first.close()
    hold_lock(path, cannot, TAKEN).close()


def test_a_place_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"cannot write \((File exists|Not a directory)\)"):
        hold_lock(tmp_path / "file" / "x.lock", cannot, TAKEN)
