"""Run one scenario: the real CLI as processes against its market, signals, races, cleanup.

A run is `python -m tests.chaos.entry run PIPELINE --backend clore` (the real `clore-run`, pace
shortened: see entry.py) with its own `--out` and `--ledger`, talking to the market through a URL
of its own (`caller` "a" or "b"), so the fake knows which run created and cancelled what. Its
`cleanup` step uses the same URL and ledger, as the action's always-run step would in that job.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.entry import HANDOVER_ENV, REAL_SHUTDOWN_ENV, RECOVER_ENV
from tests.chaos.market import Market, SshdPool, market
from tests.chaos.scenario import Scenario
from tests.fakes.clore_api import API_KEY
from tests.processes import default_signals, marked_env

REPO = Path(__file__).resolve().parents[2]
CLEANUP_BOUND_S = 60.0


@dataclass
class RunResult:
    """One `clore-run run` process and what it left behind."""

    caller: str
    command: list[str]
    code: int | None = None
    stdout: str = ""
    stderr: str = ""
    hung: bool = False
    signalled: str | None = None  # the signal sent, if it was sent before the run ended
    signal_to_exit_s: float | None = None  # from the signal to the run's end
    summary: dict[str, Any] | None = None
    live_at_exit: list[int] = field(default_factory=list)  # its orders live when it ended
    ledger: list[tuple[str, int | None, str]] = field(default_factory=list)  # job, order, state
    cleaned_up: bool = False  # its cleanup step ran
    cleanup_code: int | None = None
    cleanup_output: str = ""


@dataclass
class Outcome:
    scenario: Scenario
    market: Market
    runs: list[RunResult]
    folder: Path


def reproduce_command(scenario: Scenario) -> str:
    return f"python -m tests.chaos {scenario.replay or scenario.seed}"


class _Process:
    def __init__(self, result: RunResult, proc: subprocess.Popen[bytes], folder: Path) -> None:
        self.result, self.proc, self.folder = result, proc, folder
        self.signalled_at: float | None = None
        self.ended_at: float | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """Stamp the moment the process ends (another run's cleanup may be under way then)."""
        self.proc.wait()
        self.ended_at = time.monotonic()
        self.ended.set()


def _env(scenario: Scenario, url: str) -> dict[str, str]:
    recover = scenario.recover_delays_s
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CLORE_"))}
    keep.pop("CI", None)
    return marked_env(
        {
            **keep,
            "CLORE_API_KEY": API_KEY,
            "CLORE_API_URL": url,
            "PYTHONPATH": str(REPO),
            "NO_COLOR": "1",
            RECOVER_ENV: ",".join(map(str, recover)) if recover else "",
            REAL_SHUTDOWN_ENV: "1" if scenario.real_shutdown else "",
            HANDOVER_ENV: "1" if scenario.dirty_gpu else "",
        }
    )


def _start(m: Market, caller: str, pipeline: Path, folder: Path) -> _Process:
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "runner" if m.scenario.plain_cli else "tests.chaos.entry",
        "run", str(pipeline), "--backend", "clore",
        "--out", str(folder / "out"), "--ledger", str(folder / "ledger.db"),
    ]  # fmt: skip
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=folder,
            env=_env(m.scenario, m.url(caller)),
            preexec_fn=default_signals,
        )
    return _Process(RunResult(caller, command), proc, folder)


def _finish(m: Market, p: _Process, bound_s: float) -> None:
    """Wait for the run's end (bounded), then note what it left live and what it wrote."""
    result = p.result
    try:
        result.code = p.proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        result.hung = True
        p.proc.send_signal(signal.SIGUSR2)  # its threads' stacks to its stderr (entry.py)
        time.sleep(1.0)  # for the dump to be written; the process is killed anyway
        p.proc.kill()
        result.code = p.proc.wait(timeout=10)
    p.ended.wait(10)
    if p.signalled_at is not None and p.ended_at is not None:
        result.signal_to_exit_s = p.ended_at - p.signalled_at
    result.live_at_exit = sorted(o.id for o in m.fake.live_orders() if o.creator == result.caller)
    result.stdout = (p.folder / "stdout").read_text(errors="replace")
    result.stderr = (p.folder / "stderr").read_text(errors="replace")
    summary = p.folder / "out" / "summary.json"
    if summary.exists():
        try:
            result.summary = json.loads(summary.read_text())
        except ValueError:
            result.summary = {"unreadable": summary.read_text(errors="replace")[:200]}
    result.ledger = _ledger_rows(p.folder / "ledger.db")


def _ledger_rows(path: Path) -> list[tuple[str, int | None, str]]:
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT job_id, order_id, state FROM rentals ORDER BY id").fetchall()
    except sqlite3.Error:
        return []
    # The ledger keeps order ids as text; the fake's (Clore's) are whole numbers.
    return [(str(j), None if o is None else int(o), str(s)) for j, o, s in rows]


def _cleanup(m: Market, p: _Process) -> None:
    """The always-run step: `clore-run cleanup` on the run's ledger, with the run's key."""
    command = [
        sys.executable, "-m", "tests.chaos.entry", "cleanup",
        "--ledger", str(p.folder / "ledger.db"),
    ]  # fmt: skip
    p.result.cleaned_up = True
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            cwd=p.folder,
            env=_env(m.scenario, m.url(p.result.caller)),
            timeout=CLEANUP_BOUND_S,
        )
        p.result.cleanup_code = done.returncode
        p.result.cleanup_output = (done.stdout + done.stderr).decode(errors="replace")
        (p.folder / "cleanup.out").write_text(p.result.cleanup_output)
    except subprocess.TimeoutExpired as e:
        p.result.cleanup_code = None
        p.result.cleanup_output = f"cleanup hung past {e.timeout} s"


def play(scenario: Scenario, m: Market, folder: Path) -> list[RunResult]:
    """Run the scenario's run(s) to their ends, with its signal and cleanups."""
    (folder / "markers").mkdir(parents=True, exist_ok=True)
    pipeline = folder / "pipeline.yml"
    pipeline.write_text(scenario.pipeline(str(folder / "markers")))
    m.start()
    procs = [_start(m, "a", pipeline, folder / "a")]
    if scenario.race:
        if scenario.second_run_delay_s:
            time.sleep(scenario.second_run_delay_s)  # a scheduled start, not a wait for a state
        procs.append(_start(m, "b", pipeline, folder / "b"))
    started = time.monotonic()
    first = procs[0]
    if scenario.signal is not None:
        _signal(m, first, *scenario.signal, anchor=scenario.signal_anchor)
    left = list(procs)
    while left:  # each run's cleanup as soon as it ends, while the other may still run
        done = _first_to_end(left, started, scenario.run_bound_s)
        _finish(m, done, max(1.0, started + scenario.run_bound_s - time.monotonic()))
        if scenario.faults_end_with_run:
            m.heal()
        # The action's always-run step: after a kill, in a race (the other run's orders must
        # survive it), and whenever the run ended with an order of its own still live.
        left_live = bool(done.result.live_at_exit)
        if done.result.signalled == "SIGKILL" or scenario.race or scenario.cleanup or left_live:
            _cleanup(m, done)
        left.remove(done)
    return [p.result for p in procs]


def _signal(m: Market, p: _Process, name: str, at_s: float, anchor: str = "") -> None:
    """`name` to the run `at_s` after its first API call (to `anchor`, if given; "start": after
    the process started), unless it ended. Drawn scenarios signal after the first call: a signal
    during Python's start-up, before the CLI is there to handle it, tells nothing of rentals."""
    bound = time.monotonic() + m.scenario.run_bound_s
    caller = p.result.caller
    while anchor != "start" and not any(
        r.caller == caller and r.endpoint.startswith(anchor) for r in m.fake.requests
    ):
        if p.proc.poll() is not None or time.monotonic() > bound:
            return
        time.sleep(0.02)  # polling the fake's request log: it has no event to wait on
    if anchor == "start":
        _until_python_answers(p, getattr(signal, name), bound)
    try:
        p.proc.wait(timeout=at_s)
    except subprocess.TimeoutExpired:
        p.proc.send_signal(getattr(signal, name))
        p.result.signalled = name
        p.signalled_at = time.monotonic()


def _until_python_answers(p: _Process, sig: int, bound: float) -> None:
    """Until the process handles or holds `sig` (/proc/PID/status): before that the interpreter
    itself is still starting (on a loaded machine that can take longer than the delay), and a
    signal there meets the kernel's default, not anything clore-run can answer."""
    mask = 1 << (sig - 1)
    status = Path(f"/proc/{p.proc.pid}/status")
    while p.proc.poll() is None and time.monotonic() < bound:
        with contextlib.suppress(OSError, ValueError, KeyError):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
            if (int(fields["SigCgt"], 16) | int(fields["SigBlk"], 16)) & mask:
                return
        time.sleep(0.005)  # the kernel tells no one when a handler is set


def _first_to_end(procs: list[_Process], started: float, bound_s: float) -> _Process:
    while time.monotonic() - started < bound_s:
        for p in procs:
            if p.ended.wait(0.05 / len(procs)):
                return p
    return procs[0]


def play_scenario(scenario: Scenario, sshds: SshdPool, folder: Path) -> Outcome:
    with market(scenario, sshds) as m:
        started = m.fake.clock.now()
        runs = play(scenario, m, folder)
        write_market_log(m, folder / "market.log", started)
        return Outcome(scenario, m, runs, folder)


def write_market_log(m: Market, path: Path, started: float) -> None:
    """The fake's side of the scenario, for a person replaying a failure: every request with
    its time, caller and answer, then every order with its creator, life and bill."""
    lines = []
    for r in m.fake.requests:
        body = r.body if isinstance(r.body, dict) else {}
        what = {k: body[k] for k in ("id", "renting_server", "type", "order_id") if k in body}
        lines.append(
            f"{r.t - started:7.2f} {r.caller or '-'} {r.method} {r.endpoint} "
            f"{r.query or ''} {what or ''} -> {r.status}/{r.code}"
        )
    for o in m.fake.orders.values():
        end = "live" if o.ended_unix is None else f"ended +{o.ended_unix - o.created_unix:.2f}s"
        lines.append(
            f"order {o.id} by {o.creator or '-'} on {o.server_id} "
            f"{'spot' if o.spot else 'on-demand'} {end} cancelled_by={o.cancelled_by} "
            f"billed={m.fake.billed(o.id):.8f} {o.currency}"
        )
    path.write_text("\n".join(lines) + "\n")
