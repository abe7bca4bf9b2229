"""Run jobs as local processes: the free way to debug a pipeline before renting GPUs.

Each attempt runs as `bash --noprofile --norc -eo pipefail SCRIPT` (the GitHub Actions default
shell) in a fresh directory holding a copy of the workspace, in its own process group so that a
timeout or cancel kills background children too. Both output streams are read concurrently.

A job that leaves its directory empty, as it found it, hands the directory on to the next job
(renamed): removing an empty directory costs milliseconds of waiting on some filesystems (ext4
mounted with `discard`), more than running a short job, while a rename costs microseconds. Only
the directory made for the job qualifies (same inode, mode and owner, not a link put in its
place); its process group is killed before, so only a process that left the group on purpose
(setsid) could still be in it.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import (
    NO_STAGES,
    Backend,
    OutputSink,
    Place,
    RunOutcome,
    RunRequest,
    StageSink,
    Stream,
)
from runner.backends.fixed import FixedServers
from runner.backends.local_files import collect_artifacts, copy_workspace
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.model import FailureKind, Job

KILL_GRACE_S = 2.0  # SIGTERM first, SIGKILL after this
DRAIN_AFTER_EXIT_S = 2.0  # how long a leftover child may hold the pipes after the script ended
_READ_CHUNK = 1 << 16
_ASK_EVERY_S = 0.1  # while output flows, how often the script is asked whether it ended
# clore-run's own secrets: a job inherits this process's environment, but not these (a script
# printing its environment would put them in logs that CI uploads). A job that needs one of
# them gets it only by asking in the pipeline (`env: {PGPASSWORD: ${{ env.PGPASSWORD }}}`).
_NOT_FOR_JOBS = frozenset(
    {"CLORE_API_KEY", "CLORE_RUN_TOKEN", "CLORE_RUN_COORDINATOR", "PGPASSWORD"}
)


class LocalBackend(FixedServers):
    """Jobs run on this machine; a place is a fresh working directory. The run's concurrency
    is its number of servers (slots, from `FixedServers`), which exist from the start."""

    name = "local"

    def __init__(self, root: Path | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._parent = root
        self._clock = clock  # what a job's timeout reads
        # The job folders' root and the scripts' folder, made at the first job, not before.
        # Paths are str on the way of every job: pathlib's objects cost more than the syscalls.
        self._folders: tuple[str, str] | None = None
        self._env: dict[bytes, bytes] = {}  # taken with the folders, given back with them
        self._lock = threading.Lock()
        self._serial = 0
        # Empty directories a finished job left as it found them, for the next jobs; and what
        # each job directory was when it was made (device, inode, mode, owner), to tell.
        self._spare: list[str] = []
        self._made: dict[str, tuple[int, int, int, int, int]] = {}
        self._bash: dict[bytes | None, str | None] = {}  # bash's path, by the jobs' PATH

    def capacity(self) -> int | None:
        return None

    def place(
        self, server: int, job: Job, cancel: threading.Event, stages: StageSink = NO_STAGES
    ) -> Place:
        """A fresh working directory; every slot is this machine, so `server` is not read."""
        with self._lock:
            if self._folders is None:
                root = tempfile.mkdtemp(prefix="clore-run-", dir=self._parent)
                self._folders = (root, str(_scripts_folder(Path(root))))
                self._env = _job_environment(os.environ)
            self._serial += 1
            serial = self._serial
            root = self._folders[0]
            spare = self._spare.pop() if self._spare else None
        workdir = os.path.join(root, f"{job.id}-{serial}")
        self._make(workdir, spare)
        return Place(name="localhost", facts={"workdir": workdir})

    def _make(self, workdir: str, spare: str | None) -> None:
        """`workdir`, empty: a spare renamed, or a new directory."""
        if spare is not None:
            renamed = _renamed(spare, workdir)
            with self._lock:
                made = self._made.pop(spare)
                if renamed:
                    self._made[workdir] = made
                    return
        # No spare, or it is gone (a process that outlived its job removed it): a new one.
        os.mkdir(workdir)
        made = _identity(os.lstat(workdir))
        with self._lock:
            self._made[workdir] = made

    def run(
        self,
        place: Place,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        stages: StageSink = NO_STAGES,
    ) -> RunOutcome:
        workdir = place.facts["workdir"]
        if request.workspace_root is not None:
            count = len(request.workspace_files)
            # "uploading the workspace (3 files, a local copy)": nothing leaves this machine
            stages.stage(
                "uploading", f"the workspace ({count} file{'s' * (count != 1)}, a local copy)"
            )
            copy_workspace(request.workspace_root, request.workspace_files, Path(workdir))
            stages.stage("running")
        # Not in the workdir: the job's folder holds only the workspace and its output.
        script = self._script_path(workdir)
        _write_new(script, request.job.run.encode("utf-8"))
        env = self._env | {os.fsencode(k): os.fsencode(v) for k, v in request.env.items()}
        outcome = _run_process(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", script],
            workdir,
            env,
            sink,
            cancel,
            request.timeout_s,
            self._clock,
            self._bash_for(env),
        )
        if request.job.artifacts or request.job.junit:
            stages.stage("fetching")
            warnings = collect_artifacts(Path(workdir), request.job, request.artifacts_dir)
            # A cancelled job was stopped before it could write them: nothing to warn about.
            stopped = outcome.failure is FailureKind.CANCELLED
            for warning in () if stopped else warnings:
                sink.write("stderr", f"clore-run: {warning}\n".encode())
        return outcome

    def _bash_for(self, env: Mapping[bytes, bytes]) -> str | None:
        """Where `bash` is on the job's PATH, looked up once per PATH: Popen searched every
        directory of it for each job. None: not found (Popen's own search then says why)."""
        path = env.get(b"PATH")
        if path not in self._bash:
            where = None if path is None else os.fsdecode(path)
            self._bash[path] = shutil.which("bash", path=where or os.defpath)
        return self._bash[path]

    def attempt_done(self, place: Place) -> None:
        workdir = place.facts["workdir"]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._script_path(workdir))
        with self._lock:
            made = self._made.pop(workdir, None)
        parent, name = os.path.split(workdir)
        spare = os.path.join(parent, f".spare-{name}")
        if made is not None and _as_made(workdir, made) and _renamed(workdir, spare):
            with self._lock:
                self._made[spare] = made
                self._spare.append(spare)
            return
        shutil.rmtree(workdir, ignore_errors=True)

    def shutdown(self) -> None:
        with self._lock:
            folders, self._folders = self._folders, None
            self._env = {}
            self._spare, self._made = [], {}
        for folder in folders or ():
            shutil.rmtree(folder, ignore_errors=True)

    def _script_path(self, workdir: str) -> str:
        assert self._folders is not None  # made by the place() that made `workdir`
        return os.path.join(self._folders[1], f"{os.path.basename(workdir)}.sh")


def _job_environment(environ: Mapping[str, str]) -> dict[bytes, bytes]:
    """What every job of the run inherits, read once when the run's first job is placed and
    encoded as `Popen` would encode it: copying and encoding this process's environment for
    each job was a tenth of what a short job cost clore-run."""
    return {os.fsencode(k): os.fsencode(v) for k, v in environ.items() if k not in _NOT_FOR_JOBS}


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid)


def _as_made(workdir: str, made: tuple[int, int, int, int, int]) -> bool:
    """`workdir` is the directory made for the job (not one put in its place, not a link),
    with its mode and owner unchanged, and empty: the next job may have it as new."""
    try:
        if _identity(os.lstat(workdir)) != made or not stat.S_ISDIR(made[2]):
            return False
        with os.scandir(workdir) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _renamed(source: str, target: str) -> bool:
    try:
        os.rename(source, target)
    except OSError:
        return False
    return True


def _write_new(path: str, data: bytes) -> None:
    """`data` in a new file at `path` (mode 0666 less the umask, as open() makes it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _scripts_folder(root: Path) -> Path:
    """Where scripts are written: in memory (/dev/shm) when the machine has it, since creating
    and removing a small file there costs microseconds against milliseconds on some disks;
    beside the job folders otherwise."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        try:
            return Path(tempfile.mkdtemp(prefix="clore-run-scripts-", dir=shm))
        except OSError:
            pass
    scripts = root / ".scripts"
    scripts.mkdir()
    return scripts


def _run_process(
    argv: list[str],
    cwd: str | Path,
    env: Mapping[bytes, bytes],
    sink: OutputSink,
    cancel: threading.Event,
    timeout_s: float,
    clock: Clock = SYSTEM_CLOCK,
    executable: str | None = None,
) -> RunOutcome:
    # Pipes of our own, handed over as descriptors: with PIPE and DEVNULL, Popen also opens
    # /dev/null and wraps each pipe in a buffered file (three system calls each) per job.
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        proc = subprocess.Popen(
            argv,
            executable=executable,  # argv[0] stays what it was: `bash`
            cwd=cwd,
            env=env,
            stdin=_devnull(),
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
        )
    except BaseException as exc:
        os.close(out_r)
        os.close(err_r)
        if not isinstance(exc, OSError):
            raise
        return RunOutcome(None, FailureKind.PROVISIONING_FAILED, f"cannot start bash: {exc}")
    finally:
        os.close(out_w)  # the job holds its ends; ours would keep the pipes from closing
        os.close(err_w)
    try:
        killed = _pump(proc, {out_r: "stdout", err_r: "stderr"}, sink, cancel, timeout_s, clock)
    except BaseException:
        # The output could not be taken (the log's disk is full...): the job must not go on
        # running unseen after its attempt is over.
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        os.close(out_r)
        os.close(err_r)
    code = proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)  # background children: the job is over
    return _outcome(code, killed, timeout_s)


_DEVNULL: list[int] = []  # the descriptor, once opened
_DEVNULL_LOCK = threading.Lock()


def _devnull() -> int:
    """/dev/null, opened once for the process and never closed (close-on-exec, so only the
    jobs' stdin gets it): opening and closing it per job cost two system calls each time."""
    if not _DEVNULL:
        with _DEVNULL_LOCK:
            if not _DEVNULL:
                _DEVNULL.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))  # as DEVNULL
    return _DEVNULL[0]


def _pump(
    proc: subprocess.Popen[bytes],
    streams: dict[int, Stream],
    sink: OutputSink,
    cancel: threading.Event,
    timeout_s: float,
    clock: Clock,
) -> FailureKind | None:
    """The pipes (`streams`: descriptor to stream name) to `sink` until they close; the kill
    it took (cancel, timeout), if any. A poll object, not a selector: for two pipes it is a
    list in memory, where an epoll selector costs four system calls more per job."""
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    killed: FailureKind | None = None
    exited_at: float | None = None
    now = clock.now()
    deadline = now + timeout_s
    # Whether the script ended is asked after a quiet wait, and every _ASK_EVERY_S while
    # output flows: a short job's pipes closing says it first, at no system call.
    ask_at = now + _ASK_EVERY_S
    while streams:
        # Once the script has ended, its exit code is the verdict: draining the pipes a
        # detached child still holds is not the job running past its timeout.
        if killed is None and exited_at is None and cancel.is_set():
            killed = FailureKind.CANCELLED
        elif killed is None and exited_at is None and now >= deadline:
            killed = FailureKind.TIMEOUT
        if killed is not None and exited_at is None:
            _kill_group(proc)
            exited_at = clock.now()
        asked = exited_at is None and now >= ask_at
        if asked and proc.poll() is not None:
            # The script ended; children it left behind must not outlive it or hold the
            # pipes open forever.
            _signal_group(proc.pid, signal.SIGKILL)
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT_S:
            break
        wait_s = min(0.1 if exited_at is None else 0.05, max(0.0, deadline - now)) or 0.01
        ready = poller.poll(math.ceil(wait_s * 1000))
        for fd, _ in ready:
            data = os.read(fd, _READ_CHUNK)
            if data:
                sink.write(streams[fd], data)
            else:
                poller.unregister(fd)
                del streams[fd]
        now = clock.now()
        if not ready:
            ask_at = now
        elif asked:
            ask_at = now + _ASK_EVERY_S
    return killed


def _outcome(code: int, killed: FailureKind | None, timeout_s: float) -> RunOutcome:
    if killed is FailureKind.TIMEOUT:  # worded as the core's own timer words it
        return RunOutcome(code, FailureKind.TIMEOUT, f"timed out after {timeout_s:g} s")
    if killed is FailureKind.CANCELLED:
        return RunOutcome(code, FailureKind.CANCELLED, "cancelled")
    if code == 0:
        return RunOutcome(0, None)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return RunOutcome(128 - code, FailureKind.TEST_FAILURE, f"killed by signal {name}")
    if code == 127:
        return RunOutcome(code, FailureKind.TEST_FAILURE, "exit code 127 (command not found)")
    return RunOutcome(code, FailureKind.TEST_FAILURE, f"exit code {code}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the job's process group, SIGKILL it after a grace period."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


if TYPE_CHECKING:  # let mypy hold LocalBackend to the Backend Protocol

    def _is_a_backend(backend: LocalBackend) -> Backend:
        return backend
