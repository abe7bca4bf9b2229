"""Reading an exec channel's two streams at once, without threads.

A channel's stdout and stderr share one flow-control window (2 MiB in paramiko). Reading one
stream to its end before the other hangs as soon as the other passes the window (measured on
loopback), so every reader here takes whatever is ready on either stream and waits on both with one
`select` (paramiko's channel fileno becomes readable on data on either stream and on close).
"""

from __future__ import annotations

import io
import select
from collections.abc import Callable

import paramiko

from runner.clock import SYSTEM_CLOCK, Clock

CHUNK = 1 << 20  # read what is buffered, up to this much, per call
STDERR_TAIL = 64 * 1024  # what a reader keeps of stderr for error messages


def at_end(chan: paramiko.Channel) -> bool:
    """No more data will come: EOF (or close) seen and both buffers drained."""
    ended = bool(chan.eof_received) or chan.closed
    return ended and not chan.recv_ready() and not chan.recv_stderr_ready()


def read_some(chan: paramiko.Channel, wait_s: float) -> tuple[bytes, bytes] | None:
    """(stdout, stderr) bytes ready now, waiting up to `wait_s` for some; None once at the end.

    Both parts may be empty when nothing arrived in time.
    """
    if not chan.recv_ready() and not chan.recv_stderr_ready():
        if at_end(chan):
            return None
        select.select([chan], [], [], wait_s)
    err = chan.recv_stderr(CHUNK) if chan.recv_stderr_ready() else b""
    out = chan.recv(CHUNK) if chan.recv_ready() else b""
    if not out and not err and at_end(chan):
        return None
    return out, err


def pump(
    chan: paramiko.Channel,
    on_stdout: Callable[[bytes], None],
    on_stderr: Callable[[bytes], None],
    stop: Callable[[], bool],
    poll_s: float = 0.2,
) -> bool:
    """Forward both streams until the end (True) or until `stop()` says so (False).

    `stop` is checked at least every `poll_s` seconds, so a timeout or cancel is noticed even when
    the job prints nothing.
    """
    while True:
        if stop():
            return False
        chunk = read_some(chan, poll_s)
        if chunk is None:
            return True
        out, err = chunk
        if err:
            on_stderr(err)
        if out:
            on_stdout(out)


class Capped:
    """Bytes collected up to `limit`: the first ones, or with `tail` the last ones. What a
    server sends is its choice; what we keep of it is ours."""

    def __init__(self, limit: int, tail: bool = False) -> None:
        self.limit = limit
        self.tail = tail
        self._data = bytearray()

    def add(self, data: bytes) -> None:
        if self.tail:
            self._data += data[-self.limit :]
            del self._data[: max(0, len(self._data) - self.limit)]
        elif len(self._data) < self.limit:
            self._data += data[: self.limit - len(self._data)]

    def value(self) -> bytes:
        return bytes(self._data)


class ReadStopped(Exception):
    """A ChannelReader gave up: past its deadline, or told to stop."""


class ChannelReader(io.RawIOBase):
    """A channel's stdout as a file, for tarfile; stderr is kept (its tail) on the side.

    The server on the other end may trickle data forever: past `deadline` (`clock.now()`) or
    once `stop()` says so, a read raises ReadStopped.
    """

    def __init__(
        self,
        chan: paramiko.Channel,
        poll_s: float = 0.2,
        deadline: float | None = None,
        stop: Callable[[], bool] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__()
        self._chan = chan
        self._clock = clock
        self._poll_s = poll_s
        self._deadline = deadline
        self._stop = stop
        self._pending = memoryview(b"")  # a view, so handing out small pieces copies nothing
        self.stderr = b""

    def readable(self) -> bool:
        return True

    def drain(self, wait_s: float) -> None:
        """Read on to the channel's end, or for `wait_s` at most, keeping stderr's tail.

        A reader of stdout (tarfile) stops where its data ends; what the command wrote to
        stderr comes on a stream of its own and may arrive after that point."""
        end = self._clock.now() + wait_s
        while self._clock.now() < end and not (self._stop is not None and self._stop()):
            chunk = read_some(self._chan, min(self._poll_s, wait_s))
            if chunk is None:
                return
            if chunk[1]:
                self.stderr = (self.stderr + chunk[1])[-STDERR_TAIL:]

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._stop is not None and self._stop():
                raise ReadStopped("stopped")
            if self._deadline is not None and self._clock.now() >= self._deadline:
                raise ReadStopped("out of time")
            chunk = read_some(self._chan, self._poll_s)
            if chunk is None:
                return 0
            out, err = chunk
            self._pending = memoryview(out)
            if err:
                self.stderr = (self.stderr + err)[-STDERR_TAIL:]
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
