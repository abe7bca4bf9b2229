"""The threads that run attempts: at most a fixed number, daemons all."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence


class Task:
    """A call handed to the workers, and whether it is over (ran, or cancelled unstarted).

    Not a Future: nobody reads an answer or an exception of these (the attempt runner reports
    through the event queue)."""

    __slots__ = ("_over", "call", "cancelled")

    def __init__(self, call: Callable[[], None]) -> None:
        self.call = call
        self.cancelled = False
        self._over = threading.Event()

    def end(self) -> None:
        """Once, by the worker that ran it or by the shutdown that cancelled it."""
        self._over.set()

    def done(self) -> bool:
        return self._over.is_set()

    def wait(self, timeout_s: float) -> bool:
        """True once it is over; False when `timeout_s` passed first."""
        return self._over.wait(timeout_s)


def wait_all(tasks: Sequence[Task], timeout_s: float) -> None:
    """Until every task is over or `timeout_s` have passed, whichever comes first: real
    seconds, as the threads' waits are (a test's fake clock does not move them)."""
    until = time.monotonic() + timeout_s
    for task in tasks:
        left = until - time.monotonic()
        if left <= 0 or not task.wait(left):
            return


class Workers:
    """At most `size` daemon threads running the submitted calls, a `Task` for each.

    Not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so an attempt
    stuck in a backend that ignores its cancel would keep clore-run from exiting after the run
    had already settled it and written its reports."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)

    def submit(self, calls: Sequence[Callable[[], None]]) -> list[Task]:
        """Called from one thread only (the loop)."""
        tasks = [Task(call) for call in calls]
        for task in tasks:
            if len(self._threads) < self._size and not self._idle.acquire(blocking=False):
                name = f"job_{len(self._threads)}"
                thread = threading.Thread(target=self._serve, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            self._tasks.put(task)
        return tasks

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                if not task.cancelled:
                    task.call()
            except BaseException:  # as a pool's worker does: it lives on for the next call
                pass
            finally:
                task.end()
            self._idle.release()

    def shutdown(self) -> None:
        """Cancel what has not started; idle threads end, busy ones when their call returns."""
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.cancelled = True
                task.end()
        for _ in self._threads:
            self._tasks.put(None)
