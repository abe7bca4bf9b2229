"""What must hold after every chaos scenario (design.md §7, issue 24 part 4), as named checks.

Each check reads the outcome (the fake's orders and requests, each run's exit code, output,
summary.json and ledger) and answers violations: (invariant, detail). An empty list: all held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.backends.clore.market import offer_from_server
from runner.backends.clore.models import MarketServer
from tests.chaos.harness import Outcome, RunResult
from tests.chaos.scenario import WORST_HOLD_S
from tests.fakes.clore_api import FakeClore, FakeOrder

EXIT_CODES = {0, 1, 3, 130}
SETTLED = {"passed", "failed", "timed_out", "error", "skipped", "cancelled"}
COST_TOLERANCE = 0.01  # cost = bill within 1 %...
COST_FLOOR_USD = 2e-5  # ...or this much: summary.json rounds to 1e-6, a bill is a few cents
INVARIANTS = (
    "exit_code",
    "traceback",
    "hung",
    "leak",
    "silent_leak",
    "foreign_cancel",
    "cost_vs_bill",
    "budget",
    "settled",
    "idle_order",
    "signal",
    "rental_length",
    "dirty_reuse",
)
EXPLAINED = ("ahead of its needs", "as a hedge of a late boot")  # a rent that may run nothing
# A job that started on a server free first, while one rented for it booted, names that boot
# on its own line ("JOB: started on ..., free before GPU #HOST booting for it was up: ..."):
# starting now on a server paid for beats waiting out the boot, which then may run no job.
NOT_WAITED_FOR = "booting for it was up"
UNRELEASED_WARNING = "not confirmed released"  # how a run says it left an order to cleanup
SIGNAL_BOUND_S = 10.0  # GitHub: SIGTERM, then SIGKILL 7.5-10 s later


@dataclass(frozen=True)
class Violation:
    invariant: str
    run: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant} (run {self.run}): {self.detail}"


def check(outcome: Outcome) -> list[Violation]:
    fake = outcome.market.fake
    found: list[Violation] = []
    for run in outcome.runs:
        for name, detail in _checks(outcome, fake, run):
            found.append(Violation(name, run.caller, detail))
    return found


def _checks(outcome: Outcome, fake: FakeClore, run: RunResult) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    mine = [o for o in fake.orders.values() if o.creator == run.caller]
    killed = run.signalled == "SIGKILL" and run.code == -9
    if run.hung:
        out.append(("hung", f"still running after its bound; killed (exit {run.code})"))
    elif not killed and run.code not in EXIT_CODES:
        out.append(("exit_code", f"exit {run.code}"))
    if run.signalled in ("SIGINT", "SIGTERM") and not run.hung:
        took = run.signal_to_exit_s or 0.0
        if took > SIGNAL_BOUND_S:
            out.append(("signal", f"{run.signalled}: exit {run.code} {took:.1f} s later"))
        elif run.code != 130 and took > 1.0:
            out.append(("signal", f"{run.signalled}: exit {run.code}, not 130 ({took:.1f} s)"))
    for where, text in (("run", run.stdout + run.stderr), ("cleanup", run.cleanup_output)):
        if "Traceback" in text:
            out.append(("traceback", f"in the {where}'s output: {_around(text, 'Traceback')}"))
    out += _leaks(fake, run, mine, killed)
    foreign = sorted(
        {
            r.body["id"]
            for r in fake.calls("cancel_order")
            if r.caller == run.caller
            and isinstance(r.body, dict)
            and isinstance(r.body.get("id"), int)
            and r.body["id"] in fake.orders
            and fake.orders[r.body["id"]].creator != run.caller
        }
    )
    if foreign:
        out.append(("foreign_cancel", f"cancelled orders another run created: {foreign}"))
    out += _rental_lengths(outcome, fake, mine)
    billed = sum(billed_usd(fake, o) for o in mine)
    budget = outcome.scenario.budget_usd
    if budget is not None and billed > budget + 1e-9:
        out.append(("budget", f"billed ${billed:.6f} over the budget ${budget}"))
    if killed:
        return out
    # An order the run named as one that "may be ours" (its tag unproven) is out of its
    # accounts by design: it said so, exit 3, and left it to `cleanup --cancel-unproven`. It
    # may end by itself before the run does (its host gone), so it is not always live at exit.
    named = _named_unproven(run)
    accounted = [o for o in mine if o.id not in named]
    billed_of_run = sum(billed_usd(fake, o) for o in accounted)
    # A spot order's completed listing without `spend` cannot tell the stretches it was
    # outbid (not billed): the run settles it at the most its stamps allow, its price for
    # its whole life. Over the bill by at most that, never under it.
    unsure = sum(_most_usd(fake, o) - billed_usd(fake, o) for o in accounted if _unsure(fake, o))
    out += _summary_checks(outcome, fake, run, mine, billed_of_run, unsure)
    return out


def _unsure(fake: FakeClore, order: FakeOrder) -> bool:
    return order.spot and not fake.completed_spend and not order.live


def _most_usd(fake: FakeClore, order: FakeOrder) -> float:
    """The most a spot order could have billed by its stamps: its last bid for its whole
    life, the renter's fee, and the creation fee past the grace (USD)."""
    lived_s = fake.lived_s(order.id)
    fee = order.creation_fee if lived_s >= 600 else 0.0
    native = order.price_per_day * lived_s / 86400 * (1 + fake.fee_rate(order)) + fee
    return max(native * _usd_per_unit(fake, order), billed_usd(fake, order))


def _named_unproven(run: RunResult) -> set[int]:
    return {int(n) for n in re.findall(r"order (\d+) may be ours", run.stdout + run.stderr)}


def _rental_lengths(
    outcome: Outcome, fake: FakeClore, mine: list[FakeOrder]
) -> list[tuple[str, str]]:
    """No order on a host whose maximum rental length cannot hold a job's worst case, and
    none held until its host's maximum ended it (a server kept past its length)."""
    lengths = dict(outcome.scenario.host_lengths)
    short = [o.id for o in mine if lengths.get(o.server_id, 1e9) * 3600.0 < WORST_HOLD_S - 1e-6]
    out = []
    if short:
        out.append(("rental_length", f"rented on a host too short for any job: {short}"))
    expired = [o.id for o in mine if fake.ended_by_itself.get(o.id) == "expired"]
    if expired:
        out.append(("rental_length", f"held until its maximum rental length ended it: {expired}"))
    return out


def _leaks(
    fake: FakeClore, run: RunResult, mine: list[FakeOrder], killed: bool
) -> list[tuple[str, str]]:
    """No process end but SIGKILL with an order it knew (its ledger has the id) and never sent
    a cancel for; an order whose cancel failed may be left to the always-run cleanup step if
    the run says so, and one whose create was still unanswered to that step; after it,
    nothing of the run's is live."""
    tried = {
        r.body.get("id")
        for r in fake.calls("cancel_order")
        if r.caller == run.caller and isinstance(r.body, dict)
    }
    out = []
    known = {order for _, order, _ in run.ledger if order is not None}
    never = [o for o in run.live_at_exit if o not in tried]
    if not killed and [o for o in never if o in known]:
        out.append(("leak", f"id known, cancel never sent: {_orders(fake, never)}"))
    said = UNRELEASED_WARNING in run.stdout + run.stderr
    if not killed and run.live_at_exit and not never and not said:
        out.append(("leak", f"live when the run ended, unsaid: {_orders(fake, run.live_at_exit)}"))
    live = [o.id for o in mine if o.live]
    if live:
        where = "after the cleanup step" if run.cleaned_up else "after the run"
        code, words = last_word(run)
        if code == 0:
            out.append(("silent_leak", f"live {where}, exit 0: {_orders(fake, live)}"))
        elif not _named(fake, live, code, words):
            out.append(("leak", f"live {where}: {_orders(fake, live)}"))
    return out


def last_word(run: RunResult) -> tuple[int | None, str]:
    """The exit code and output of what ran last for the run: its cleanup step, or itself."""
    if run.cleaned_up:
        return run.cleanup_code, run.cleanup_output
    return run.code, run.stdout + run.stderr


def _named(fake: FakeClore, live: list[int], code: int | None, said: str) -> bool:
    """An order that may be ours and cannot be proven is left running, by design, only when
    it is named (its order or server) with exit 3 and the command that cancels it."""
    if code != 3 or "--cancel-unproven" not in said:
        return False
    return all(
        str(order_id) in said or f"server {fake.orders[order_id].server_id}" in said
        for order_id in live
    )


def _summary_checks(
    outcome: Outcome,
    fake: FakeClore,
    run: RunResult,
    mine: list[FakeOrder],
    billed: float,
    unsure: float = 0.0,
) -> list[tuple[str, str]]:
    summary = run.summary
    if summary is None and run.code == 130 and run.signalled and not mine:
        # Stopped while it started up (the pipeline not yet read, nothing rented): it answers
        # 130 with one line and has no jobs to settle; the example signal_at_start lands here
        # whenever start-up outlasts its 0.3 s, as on a loaded machine.
        return []
    if summary is None or "jobs" not in summary:
        return [("settled", f"no summary.json (exit {run.code})")]
    out: list[tuple[str, str]] = []
    cost = float(summary.get("total_cost_usd") or 0.0)
    # An order left live bills on past the run's end: that is the leak's finding, not this one.
    tolerance = max(COST_TOLERANCE * billed, COST_FLOOR_USD)
    off_usd = cost - billed - min(max(0.0, cost - billed), unsure)
    if not run.live_at_exit and abs(off_usd) > tolerance:
        off = 100 * (cost - billed) / billed if billed else float("inf")
        out.append(
            (
                "cost_vs_bill",
                f"summary ${cost:.6f}, billed ${billed:.6f} ({off:+.1f} %) over {len(mine)} orders",
            )
        )
    wanted = {j.name for j in outcome.scenario.jobs}
    statuses = {j.get("id"): j.get("status") for j in summary["jobs"]}
    unsettled = sorted(k for k in wanted if statuses.get(k) not in SETTLED)
    if unsettled:
        out.append(("settled", f"jobs not settled: {[(k, statuses.get(k)) for k in unsettled]}"))
    if run.signalled is None:
        idle = _idle_orders(outcome, run, mine, summary)
        if idle:
            out.append(("idle_order", idle))
    dirty = _dirty_reuses(outcome, summary)
    if dirty:
        out.append(("dirty_reuse", dirty))
    return out


def _dirty_reuses(outcome: Outcome, summary: dict[str, object]) -> str:
    """Attempts that started on an order after a job that left its GPU busy ran there: that
    server failed its clean handover and must have gone back (scenario.py, `dirty_gpu`)."""
    runs = [
        (str(a.get("facts", {}).get("order_id")), j.get("id"), a)
        for j in summary.get("jobs", [])  # type: ignore[attr-defined]
        for a in j.get("attempt_details", [])
        if a.get("facts", {}).get("order_id") and a.get("offset_s") is not None
    ]
    reused = []
    for order, job, attempt in runs:
        if job not in outcome.scenario.dirty_gpu or attempt.get("exit_code") is None:
            continue  # never ran its script: nothing was left
        ended = float(attempt["offset_s"]) + float(attempt.get("duration_s") or 0.0)
        reused += [
            f"{other} on order {order} after {job}"
            for o, other, a in runs
            if o == order and a is not attempt and float(a["offset_s"]) >= ended - 1e-3
        ]
    return f"a server that failed its handover ran again: {', '.join(reused)}" if reused else ""


def _idle_orders(
    outcome: Outcome, run: RunResult, mine: list[FakeOrder], summary: dict[str, object]
) -> str:
    """Orders that ran no job and that no host fault, rent-ahead notice, boot not waited for or
    lost create explains.

    summary.json's attempt facts carry `order_id`; nothing there says "rented ahead" or "hedge"
    yet, so the run's own line "JOB: renting ... ahead of its needs" (or "... as a hedge of a
    late boot") on its output is the explanation looked for, matched to the order through the
    ledger's job of that order."""
    used = {
        str(a.get("facts", {}).get("order_id"))
        for j in summary.get("jobs", [])  # type: ignore[attr-defined]
        for a in j.get("attempt_details", [])
    }
    faulty = {h.server_id for h in outcome.scenario.hosts if h.fault}
    faulty |= {host for host, _ in outcome.scenario.host_ends}  # gone under a boot or a job
    # A pull that outlasts the boot bound: the order is given up still deploying, no job run.
    faulty |= {server_id for server_id, _ in outcome.scenario.pulls_s}
    job_of = {order: job for job, order, _ in run.ledger if order is not None}
    unexplained = []
    said_unproven = [line for line in run.stdout.splitlines() if "may be ours" in line]
    for order in mine:
        if str(order.id) in used or order.server_id in faulty:
            continue
        if any(str(order.id) in line for line in said_unproven):
            continue  # named as maybe ours and not proven: left running on purpose, exit 3
        job = job_of.get(order.id)
        if job is not None and any(
            f"{job}: renting" in line and any(why in line for why in EXPLAINED)
            for line in run.stdout.splitlines()
        ):
            continue
        if job is not None and any(
            f"{job}: started on" in line and f"#{order.server_id} {NOT_WAITED_FOR}" in line
            for line in run.stdout.splitlines()
        ):
            continue
        unexplained.append(f"{order.id} (server {order.server_id}, job {job})")
    return f"orders that ran no job: {', '.join(unexplained)}" if unexplained else ""


def billed_usd(fake: FakeClore, order: FakeOrder) -> float:
    """What the wallet lost for the order, in USD at the server's own rate (fees included)."""
    return fake.billed(order.id) * _usd_per_unit(fake, order)


def _usd_per_unit(fake: FakeClore, order: FakeOrder) -> float:
    offer = offer_from_server(
        MarketServer.model_validate(fake.servers[order.server_id]), order.currency
    )
    return offer.usd_per_unit or 0.0


def _orders(fake: FakeClore, ids: list[int]) -> str:
    parts = []
    for order_id in ids:
        order = fake.orders[order_id]
        cancels = [r for r in fake.calls("cancel_order") if (r.body or {}).get("id") == order_id]
        tried = ", ".join(f"{r.status}/{r.code}" for r in cancels) or "never cancelled"
        kind = "spot" if order.spot else "on-demand"
        parts.append(f"{order_id} ({kind} on {order.server_id}; cancels: {tried})")
    return "; ".join(parts)


def _around(text: str, needle: str) -> str:
    lines = [line for line in text[text.find(needle) :].splitlines() if line.strip()]
    return " | ".join(lines[-3:])
