"""The guard that no process a test starts outlives it (tests/processes.py, tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import processes
from tests.processes import LAUNCHES, Launches, alive, kill_marked

# Starts a child in a session of its own (as the local backend starts a job), says its pid,
# then both wait to be killed.
_PARENT_AND_ORPHAN = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(300)\n"
)


def test_what_a_test_left_running_is_killed_and_named_below_it_too() -> None:
    launches = Launches()
    launches.begin()
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT_AND_ORPHAN],
        stdout=subprocess.PIPE,
        text=True,
        env=launches.env(),
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        left = launches.end()
        parent.wait(timeout=10)
        # By number, as the guard lists them: as text, 99998 sorts after 100003.
        assert [int(line.split(":")[0]) for line in left] == sorted([parent.pid, child])
        assert any("sleep 300" in line for line in left)
        assert not alive(child)
        assert launches.token == launches.session  # what starts next is the run's
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_another_tests_processes_are_left_alone_and_a_test_that_started_none_looks_for_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine, other = Launches(), Launches()
    other.begin()
    sleeper = subprocess.Popen(["sleep", "300"], env=other.env())
    try:
        with monkeypatch.context() as patched:
            patched.setattr(processes, "kill_marked", _no_look)
            mine.begin()
            assert mine.end() == []  # it started nothing: no pass over /proc at all
        mine.begin()
        mine.env()
        assert mine.end() == []
        assert alive(sleeper.pid)
        assert kill_marked(other.token) == [f"{sleeper.pid}: sleep 300"]
        sleeper.wait(timeout=10)
    finally:
        sleeper.kill()
        sleeper.wait()


def _no_look(token: str) -> list[str]:
    raise AssertionError("looked for processes of a test that started none")


def test_the_guard_is_on_for_every_test() -> None:
    assert LAUNCHES.token != LAUNCHES.session  # the autouse fixture began this test
    assert not LAUNCHES.launched
