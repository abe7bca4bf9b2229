"""A holder is provably alive or dead only on its own host, boot and pid namespace."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from runner import liveness


def test_this_process_is_alive_and_reads_back_from_its_text() -> None:
    me = liveness.current()
    assert me is not None
    assert liveness.Holder.parse(me.text()) == me
    assert liveness.state(me) is True


def test_a_killed_child_is_dead_and_a_reused_pid_is_not_its_holder() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = liveness.current()
        assert here is not None
        started = liveness._started(child.pid)
        assert started is not None
        holder = dataclasses.replace(here, pid=child.pid, started=started)
        assert liveness.state(holder) is True
        # The pid now names a process that started at another time: not the holder.
        assert liveness.state(dataclasses.replace(holder, started=started + 1)) is False
    finally:
        child.kill()
        child.wait()
    assert liveness.state(holder) is False


def test_elsewhere_nothing_is_proven() -> None:
    here = liveness.current()
    assert here is not None
    assert liveness.state(dataclasses.replace(here, host="another-machine")) is None
    assert liveness.state(dataclasses.replace(here, where="other-boot pid:[1]")) is None
    assert liveness.state(None) is None
    assert liveness.Holder.parse(None) is None
    assert liveness.Holder.parse('{"host": "h"}') is None
    assert liveness.Holder.parse("not json") is None
