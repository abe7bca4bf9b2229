"""An attempt's Kill: a threading.Event's contract, and the reason it was given."""

from __future__ import annotations

import threading

from runner.core.model import FailureKind
from runner.engine.attempt import Kill


def test_a_kill_is_an_event_unset_until_stopped_and_keeps_the_first_reason() -> None:
    kill = Kill()
    assert isinstance(kill, threading.Event) and not kill.is_set()
    assert kill.wait(0) is False and kill.wait(0.01) is False and kill.wait(-1) is False
    kill.stop(FailureKind.TIMEOUT, "over time")
    kill.stop(FailureKind.CANCELLED)  # a later stop changes nothing
    assert kill.is_set() and kill.wait() is True and kill.wait(0) is True
    assert (kill.reason, kill.note) == (FailureKind.TIMEOUT, "over time")
    kill.clear()
    assert not kill.is_set() and kill.wait(0.01) is False
    kill.set()
    kill.set()  # twice: still set, once
    assert kill.wait(0) is True


def test_every_waiter_wakes_when_the_kill_is_set() -> None:
    kill = Kill()
    waiting = threading.Barrier(5)
    woke: list[bool] = []

    def wait() -> None:
        waiting.wait()
        woke.append(kill.wait(30))

    threads = [threading.Thread(target=wait) for _ in range(4)]
    for thread in threads:
        thread.start()
    waiting.wait()  # all four are at their wait (or about to be: both ways they must wake)
    kill.set()
    for thread in threads:
        thread.join(30)
    assert woke == [True] * 4
