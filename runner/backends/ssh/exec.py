"""Running one job attempt on a server over an open SSH connection.

Independent of how the server was obtained (named by the user, or rented from Clore). Each attempt:

1. one exec makes a fresh folder `~/.clore-run/jobs/<job>.XXXXXXXX/` and unpacks a tar stream into
   it: `work/` (the workspace, the job's working directory), `ctl/script.sh` (the job's script, as
   a file: a line `EOF` or `SCRIPT` in it ends nothing) and `ctl/env.sh` (`export` lines, values
   shlex-quoted);
2. the script runs under `setsid` (its own process group) as `bash --noprofile --norc -eo pipefail`;
   both output streams are forwarded live; the group's id lands in `ctl/pgid`;
3. on timeout or cancel the group gets TERM, then KILL: closing the channel would not stop it
   (sshd leaves the process running), and root may not send signal requests. Processes a
   finished job left behind are killed too, as GitHub Actions does with orphans, so they
   cannot disturb the next job;
4. artifacts and the junit file come back as a tar stream, extracted with path checks;
5. the folder is removed.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from signal import Signals
from typing import Protocol

import paramiko

from runner.backends.base import NO_STAGES, OutputSink, RunOutcome, RunRequest, StageSink
from runner.backends.safe_extract import ExtractReport, safe_extract
from runner.backends.ssh.channel import STDERR_TAIL, Capped, ChannelReader, ReadStopped, pump
from runner.backends.ssh.connection import ConnectionLost, SshConnection, exit_status
from runner.backends.ssh.tar import Entry, file_entry, write_tar
from runner.clock import SYSTEM_CLOCK, Clock
from runner.core.model import FailureKind
from runner.errors import InfrastructureError, LocalFault

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Line breaks and control characters in text a server sends: a message is printed as one line
# (in the Actions log, a line of its own starting with `::` would be a workflow command).
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# The job folder the server names: an absolute path on one line, of a sane length.
_FOLDER = re.compile("/[^\x00-\x1f\x7f]{1,4000}")
_SEND_POLL_S = 0.2  # how often a send blocked on the server looks for a cancel

_PREPARE = """set -e
root="${{HOME:-/tmp}}/.clore-run/jobs"
mkdir -p "$root"
d=$(mktemp -d "$root/{name}.XXXXXXXX")
cd "$d"
tar -x -f - --no-same-owner
printf '%s' "$d"
"""

# Fixed text; only the quoted job folder is filled in. Not `exec setsid`: run from the login
# shell (a group leader under sshd), setsid would fork and, with -w, print "setsid: child N did
# not exit normally: Success" into the job's stderr when the script dies of a signal. As the
# shell's child it makes its own session in place, and the shell sees 128+N like bash would.
# The stderr of setsid and of this shell (bash reports "Killed ..." for a child a signal ended)
# goes nowhere; fd 3 carries the job's own stderr past that.
_START = """cd {work} || exit 126
command -v setsid >/dev/null 2>&1 || {{ echo "clore-run: setsid (util-linux) is missing on the \
server" >&2; exit 127; }}
{{ setsid -w bash --noprofile --norc -c {inner} </dev/null; }} 3>&2 2>/dev/null
exit $?
"""
# Each job's TMPDIR is in its own folder (its env may set another): what tools write there
# goes with the folder, and the next job on the server finds none of it.
_INNER = 'exec 2>&3 3>&- && echo $$ > ../ctl/pgid && mkdir -p ../tmp && export \
TMPDIR="${PWD%/work}/tmp" && . ../ctl/env.sh && exec bash --noprofile --norc -eo pipefail \
../ctl/script.sh'

_SIGNAL = """f={pgid_file}; i=0
while [ ! -s "$f" ] && [ "$i" -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done
[ -s "$f" ] && kill -{signal} -- "-$(cat "$f")" 2>/dev/null
exit 0
"""

# Globs are expanded by bash on the server (positional args, never pasted into the text);
# IFS= keeps names with spaces whole, nullglob drops patterns that match nothing, and a file that
# several patterns match is sent once.
_COLLECT = """shopt -s nullglob globstar
IFS=
files=()
declare -A seen
for p in "$@"; do matched=; for f in $p; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  matched=1
  [ -n "${seen[$f]}" ] || { seen[$f]=1; files+=("$f"); }
done; [ -n "$matched" ] || printf 'clore-run-unmatched\t%s\n' "$p" >&2; done
[ ${#files[@]} -eq 0 ] && exec tar -c -f - -T /dev/null
exec tar -c -f - -- "${files[@]}"
"""


@dataclass(frozen=True)
class ExecOptions:
    kill_grace_s: float = 2.0  # between TERM and KILL
    drain_s: float = 5.0  # how long output may still trickle in after the job ended or was killed
    pgid_wait_s: float = 5.0  # a job cancelled right at its start may not have written ctl/pgid
    keep_workdir: bool = False
    # Sending the workspace: a server could stop reading it, or never answer after it.
    upload_timeout_s: float = 1800.0
    # Bringing the artifacts back: a server could trickle them forever, while billing.
    artifact_timeout_s: float = 1800.0
    clock: Clock = SYSTEM_CLOCK  # what the job's deadlines read


class CancelFlag(Protocol):
    """What run_job needs of a cancel signal (a threading.Event is one)."""

    def is_set(self) -> bool: ...


class _Stopped(Exception):
    def __init__(self, failure: FailureKind, message: str) -> None:
        super().__init__(message)
        self.failure = failure


def run_job(
    conn: SshConnection,
    request: RunRequest,
    sink: OutputSink,
    cancel: CancelFlag,
    options: ExecOptions = ExecOptions(),  # frozen, so sharing it is safe
    stages: StageSink = NO_STAGES,
) -> RunOutcome:
    """Run one attempt on `conn` and say how it ended. Never raises for remote trouble."""
    job = RemoteJob(conn, request, options)
    try:
        outcome = job.run(sink, cancel, stages)
        notes = ""
        if conn.alive:
            stages.stage("fetching")
            notes = job.fetch_artifacts(sink, cancel)
    except ConnectionLost as exc:
        return RunOutcome(None, FailureKind.SERVER_LOST, str(exc), job.facts())
    except LocalFault as exc:  # ours (a workspace file gone): no other server would help
        return RunOutcome(None, FailureKind.UNAVAILABLE, str(exc), job.facts())
    except InfrastructureError as exc:
        if not conn.alive:
            return RunOutcome(None, FailureKind.SERVER_LOST, conn.lost_reason(), job.facts())
        return RunOutcome(None, FailureKind.SSH_FAILED, str(exc), job.facts())
    finally:
        job.remove()
    message = "; ".join(m for m in (outcome.message, notes) if m)
    return RunOutcome(outcome.exit_code, outcome.failure, message, job.facts())


class RemoteJob:
    """One attempt's folder and process group on the server."""

    def __init__(self, conn: SshConnection, request: RunRequest, options: ExecOptions) -> None:
        self.conn = conn
        self.request = request
        self.options = options
        self.folder: str | None = None
        self._started = False

    def facts(self) -> dict[str, str]:
        facts = {"host": str(self.conn.endpoint), "host_key": self.conn.host_key_fingerprint}
        if self.folder:
            facts["workdir"] = f"{self.folder}/work"
        return facts

    def run(
        self, sink: OutputSink, cancel: CancelFlag, stages: StageSink = NO_STAGES
    ) -> RunOutcome:
        bad = [name for name in self.request.env if not _ENV_NAME.fullmatch(name)]
        if bad:
            return RunOutcome(None, FailureKind.TEST_FAILURE, f"invalid env names: {bad}")
        stages.stage("uploading", str(self.conn.endpoint))
        try:
            self.upload(cancel)
        except InfrastructureError:
            if cancel.is_set() and self.conn.alive:  # not a server fault: do not retry it
                return RunOutcome(None, FailureKind.CANCELLED, "cancelled during the upload")
            raise
        if cancel.is_set():
            return RunOutcome(None, FailureKind.CANCELLED, "cancelled before the start")
        chan = self.conn.exec(_START.format(work=self._path("work"), inner=shlex.quote(_INNER)))
        self._started = True
        stages.stage("running")
        try:
            return self._follow(chan, sink, cancel)
        except BaseException:  # a failing log, say: the job must not run on unseen
            if self.conn.alive:
                with contextlib.suppress(InfrastructureError):
                    self.signal("KILL", wait_for_start=True)
            raise
        finally:
            chan.close()

    def upload(self, cancel: CancelFlag) -> None:
        """Make the fresh folder and send workspace, script and env into it as one tar stream,
        within `upload_timeout_s` and until a cancel."""
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.request.job.id)[:60] or "job"
        limit_s = self.options.upload_timeout_s
        deadline = self.options.clock.now() + limit_s

        def why_stop() -> str:
            if cancel.is_set():
                return "cancelled"
            return f"not done within {limit_s:g} s" if self.options.clock.now() >= deadline else ""

        chan = self.conn.exec(_PREPARE.format(name=name))
        out = Capped(4096)
        err = Capped(STDERR_TAIL, tail=True)
        try:
            try:
                send = _bounded_send(chan, why_stop, deadline, self.options.clock)
                _stream_in(chan, lambda _: write_tar(send, self._entries(), self.options.clock))
            except OSError as exc:
                raise InfrastructureError(f"workspace upload stopped: {exc}") from exc
            if not pump(chan, out.add, err.add, lambda: bool(why_stop())):
                raise InfrastructureError(f"{self.conn.endpoint}: upload {why_stop()}")
            code = exit_status(chan, wait_s=self.options.drain_s)
        finally:
            chan.close()
        if code != 0:
            if not self.conn.alive:
                raise ConnectionLost(self.conn.lost_reason())
            detail = one_line(err.value().decode("utf-8", "replace"))[-2000:]
            raise InfrastructureError(f"{self.conn.endpoint}: upload failed ({code}): {detail}")
        folder = out.value().decode("utf-8", "surrogateescape")
        if not _FOLDER.fullmatch(folder):
            shown = one_line(folder.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
            raise InfrastructureError(
                f"{self.conn.endpoint}: the server named no usable job folder: {shown[:100]!r}"
            )
        self.folder = folder

    def _entries(self) -> list[Entry]:
        env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.request.env.items())
        entries = [
            Entry("ctl", mode=0o700),
            Entry("ctl/script.sh", data=self.request.job.run.encode("utf-8", "surrogateescape")),
            Entry("ctl/env.sh", data=env.encode("utf-8", "surrogateescape"), mode=0o600),
            Entry("work", mode=0o755),
        ]
        root = self.request.workspace_root
        if root is not None:
            entries += [file_entry(root, rel, "work") for rel in self.request.workspace_files]
        return entries

    def _follow(self, chan: paramiko.Channel, sink: OutputSink, cancel: CancelFlag) -> RunOutcome:
        deadline = self.options.clock.now() + self.request.timeout_s

        def stopped() -> _Stopped | None:
            if cancel.is_set():
                return _Stopped(FailureKind.CANCELLED, "cancelled; process group killed")
            if self.options.clock.now() >= deadline:
                limit = f"{self.request.timeout_s:g}"
                return _Stopped(FailureKind.TIMEOUT, f"timed out after {limit} s; killed")
            return None

        def out(data: bytes) -> None:
            sink.write("stdout", data)

        def err(data: bytes) -> None:
            sink.write("stderr", data)

        pump(chan, out, err, lambda: stopped() is not None or chan.exit_status_ready())
        reason = stopped()
        if reason is not None and not chan.exit_status_ready():
            return self._stop(chan, reason, out, err)
        self.signal("KILL", wait_for_start=False)  # orphans must not outlive the job
        self._drain(chan, out, err, self.options.drain_s)
        return self._verdict(chan)

    def _stop(
        self,
        chan: paramiko.Channel,
        reason: _Stopped,
        out: Callable[[bytes], None],
        err: Callable[[bytes], None],
    ) -> RunOutcome:
        """TERM the group, give it a moment to end (output still flowing), then KILL it."""
        self.signal("TERM", wait_for_start=True)
        self._drain(chan, out, err, self.options.kill_grace_s)
        self.signal("KILL", wait_for_start=False)
        self._drain(chan, out, err, self.options.drain_s)
        return RunOutcome(None, reason.failure, str(reason))

    def _drain(
        self,
        chan: paramiko.Channel,
        out: Callable[[bytes], None],
        err: Callable[[bytes], None],
        within_s: float,
    ) -> None:
        until = self.options.clock.now() + within_s
        pump(chan, out, err, lambda: self.options.clock.now() >= until)

    def _verdict(self, chan: paramiko.Channel) -> RunOutcome:
        code = exit_status(chan, wait_s=self.options.drain_s)
        if code is None:
            if not self.conn.alive:
                raise ConnectionLost(self.conn.lost_reason())
            return RunOutcome(
                None, FailureKind.TEST_FAILURE, "ended without an exit code (signal?)"
            )
        if code != 0:
            return RunOutcome(code, FailureKind.TEST_FAILURE, _exit_words(code))
        return RunOutcome(0, None)

    def signal(self, signal: str, wait_for_start: bool) -> None:
        """Send `signal` to the job's process group (waiting for it to exist, if asked)."""
        ticks = int(self.options.pgid_wait_s * 10) if wait_for_start else 0
        pgid_file = self._path("ctl/pgid")
        self.conn.run(_SIGNAL.format(pgid_file=pgid_file, ticks=ticks, signal=signal))

    def fetch_artifacts(self, sink: OutputSink, cancel: CancelFlag) -> str:
        """Bring the artifacts and junit file into `artifacts_dir`; returns notes for the report.

        Within `artifact_timeout_s`, and not after a cancel (the server must be released soon).
        """
        job = self.request.job
        patterns = list(dict.fromkeys((*job.artifacts, *((job.junit,) if job.junit else ()))))
        if not patterns or self.folder is None:
            return ""
        args = " ".join(shlex.quote(p) for p in patterns)
        command = f"cd {self._path('work')} && exec bash --noprofile --norc -c " + shlex.quote(
            _COLLECT
        )
        limit = self.options.artifact_timeout_s
        chan = self.conn.exec(f"{command} clore-run-artifacts {args}")
        try:
            clock = self.options.clock
            reader = ChannelReader(
                chan, deadline=clock.now() + limit, stop=cancel.is_set, clock=clock
            )
            report = _extract(reader, self.request, limit)
            if not isinstance(report, str):  # else the remote tar may be stuck: do not wait
                reader.drain(self.options.drain_s)  # the collector's notes on unmatched globs
                exit_status(chan, wait_s=self.options.drain_s)
        finally:
            chan.close()
        if not self.conn.alive:
            raise ConnectionLost(self.conn.lost_reason())
        return _artifact_notes(report, reader.stderr, sink, patterns)

    def remove(self) -> None:
        """Delete the job's folder (best effort: the connection may be gone)."""
        if self.folder is None or self.options.keep_workdir or not self.conn.alive:
            return
        # A leftover folder on a server is not worth failing the job for.
        with contextlib.suppress(InfrastructureError):
            self.conn.run(f"rm -rf -- {shlex.quote(self.folder)}")

    def _path(self, relative: str) -> str:
        assert self.folder is not None
        return shlex.quote(f"{self.folder}/{relative}")


def _exit_words(code: int) -> str:
    """128+N is how bash reports a child that signal N ended (a script may exit so itself)."""
    number = code - 128
    if number in {s.value for s in Signals}:
        return f"exit code {code} (killed by {Signals(number).name}?)"
    return f"exit code {code}"


def one_line(text: str) -> str:
    """`text` from a server as one line without control characters."""
    return _BREAKS.sub(" ", text).strip()


def _bounded_send(
    chan: paramiko.Channel, why_stop: Callable[[], str], deadline: float, clock: Clock
) -> Callable[[bytes], None]:
    """`chan.sendall` that gives up at `deadline` (a server may stop reading) or a cancel.

    A send blocked on a full window is woken every `_SEND_POLL_S` to look at both again.
    """

    def send(data: bytes) -> None:
        left = memoryview(data)  # slices copy nothing
        while left:
            why = why_stop()
            if why:
                raise UploadStopped(why)
            chan.settimeout(min(_SEND_POLL_S, max(0.01, deadline - clock.now())))
            try:
                sent = chan.send(left)  # type: ignore[arg-type]  # any buffer will do
                left = left[sent:]
            except TimeoutError:
                continue

    return send


class UploadStopped(OSError):
    """The workspace upload ran out of time or was cancelled."""


def _stream_in(
    chan: paramiko.Channel, produce: Callable[[Callable[[bytes], None]], object]
) -> None:
    """Feed a channel's stdin; a remote side that exits early just ends the feeding."""
    try:
        produce(chan.sendall)
        chan.shutdown_write()
    except OSError:
        if not chan.closed:
            raise  # our side failed: a workspace file could not be read
        # else the remote side ended early: its exit code and stderr, read next, say why


def _extract(reader: ChannelReader, request: RunRequest, limit_s: float) -> ExtractReport | str:
    try:
        return safe_extract(reader, request.artifacts_dir)  # type: ignore[arg-type]
    except tarfile.TarError as exc:
        return f"artifacts unreadable: {exc}"
    except ReadStopped as exc:
        why = "cancelled" if str(exc) == "stopped" else f"not done within {limit_s:g} s"
        return f"artifacts not all fetched: {why}"


def _artifact_notes(
    report: ExtractReport | str, stderr: bytes, sink: OutputSink, patterns: list[str]
) -> str:
    if isinstance(report, str):
        notes = [report]
    else:
        # Names cut short: a pax header can make one a megabyte long.
        notes = [f"artifact {name[:200]!r} refused: {why}" for name, why in report.rejected]
        if report.more_refused:
            notes.append(f"{report.more_refused:,} more artifacts refused")
    for note in notes:
        sink.write("stderr", f"clore-run: {note}\n".encode())
    unmatched, rest = _unmatched(stderr.decode("utf-8", "replace"), patterns)
    for pattern in unmatched:  # a warning, as on the local backend: the verdict stands
        sink.write("stderr", f"clore-run: artifact '{pattern}' matched no file\n".encode())
    tail = rest.strip()
    if tail:
        sink.write("stderr", f"clore-run: collecting artifacts: {tail}\n".encode())
    return "; ".join(notes)


def _unmatched(stderr: str, patterns: list[str]) -> tuple[list[str], str]:
    """(the patterns the collector said matched nothing, the rest of its stderr).

    The server writes that stderr: only names among the patterns we sent are believed.
    """
    sent = set(patterns)
    unmatched: list[str] = []
    rest: list[str] = []
    for line in stderr.splitlines(keepends=True):
        tag, _, name = line.rstrip("\n").partition("\t")
        if tag == "clore-run-unmatched" and name in sent:
            unmatched.append(name)
        else:
            rest.append(line)
    return unmatched, "".join(rest)
