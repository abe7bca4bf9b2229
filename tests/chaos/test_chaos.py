"""The randomized fault suite's quick set (issue 24, part 4; design.md §7).

Every case is a scenario played by the real CLI against the fake Clore on real sshds
(tests/chaos/harness.py) and checked against every invariant (tests/chaos/invariants.py). The
selected cases of a session are played together, a few at a time (`verdicts`), then each test
reads its own verdict. A failure prints the scenario, its seed and the command that replays it:
`python -m tests.chaos SEED --small` (the quick set's seeds are drawn small), or
`python -m tests.chaos --example NAME`.

A defect the suite finds is held here until it is fixed: its invariant in TOLERATED while it
breaks most runs, a seed that shows it every time in KNOWN_FAILING, and a case of its own in
EXAMPLES, each a strict xfail naming the finding (notes/chaos-findings.md): when the fix
lands the test XPASSes, fails, and the mark comes off. The issue's defects, and F7, F9 and
F12 that the suite found, were held so and are fixed on main: every case here holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos import examples
from tests.chaos.invariants import INVARIANTS, Violation
from tests.chaos.scenario import Scenario, draw
from tests.chaos.suite import Verdict, play_all

# The fault suite runs the real CLI against the fake Clore and real sshds: the slow lane.
pytestmark = pytest.mark.slow

PARALLEL = 4  # scenarios at once: each is mostly waiting (boots, jobs' sleeps, start-up)

# Small scenarios (3-5 jobs): plain runs, API and host faults, SIGINT, SIGTERM, SIGKILL +
# cleanup, races (120, 138); 105, 110 and 138 found F2 and F3 before those were fixed.
QUICK_SEEDS = [
    100, 101, 102, 104, 105, 106, 108, 110, 113, 114,
    117, 119, 120, 121, 122, 125, 128, 131, 133, 138,
]  # fmt: skip

# Invariants broken in nearly every run while a defect is open: a quick seed may break them
# (reported, not failed) until the fix lands; a strict xfail proves it on a case of its own.
TOLERATED: dict[str, str] = {}  # none left: F1 (cost over the bill) was the last, fixed

# Drawn seeds (small) that break an invariant, with the finding that explains it.
# Only seeds that break it every time are listed (a strict xfail must not flake): most
# defects depend on timing, and their examples below show them reliably.
# A case "big:N" is seed N drawn full size (3-10 jobs), as the long run draws them.
KNOWN_FAILING: dict[str, tuple[str, str]] = {
    # F9, fixed: after a late-sshd boot was given up, j1 waited for ever beside the server
    # rented ahead for j2, which needs j1 (a job may take a server rented ahead for a job not
    # ready yet). Kept as a case that must hold.
    "big:1094": ("hung", ""),
    # Fixed: an order whose tag was not listed yet (deploying) or unreadable, `ct` stamped
    # 60 s (7011) or 20 s (7035) after the create's answer, was read as not ours: cleanup
    # marked a 500-but-created create's spot order failed, exit 0, billing on (7011); a run
    # never named the billing order of an accepted create (7035). Kept as cases that hold.
    "big:7011": ("silent_leak", ""),
    "big:7035": ("idle_order", ""),
}
KNOWN_BOUND_S = 60.0  # a hang needs no 90 s to show; a healthy run of 1094 takes 10-25 s


def _exactly_one_order(verdict: Verdict) -> list[str]:
    orders = verdict.outcome.market.fake.orders
    return [] if len(orders) == 1 else [f"{len(orders)} orders for a chain on one server"]


def _passed_on_one_order_each(verdict: Verdict) -> list[str]:
    """The issue's figures for the two-job pipeline: exit 0, no more orders than jobs."""
    orders = len(verdict.outcome.market.fake.orders)
    jobs = len(verdict.scenario.jobs)
    return _all_pass(verdict) + ([f"{orders} orders for {jobs} jobs"] if orders > jobs else [])


def _interrupted(verdict: Verdict) -> list[str]:
    codes = verdict.exit_codes
    return [] if codes == [130] else [f"exit codes {codes}, not [130]"]


def _nothing_left(verdict: Verdict) -> list[str]:
    """The killed run's cleanup proved its order by the tag and cancelled it: exit 0, none
    left billing (an unproven order named with exit 3 would hold the invariants, not this)."""
    (run,) = verdict.outcome.runs
    live = [o.id for o in verdict.outcome.market.fake.orders.values() if o.live]
    if run.cleanup_code == 0 and not live:
        return []
    return [f"cleanup exit {run.cleanup_code}, orders left billing: {live}"]


def _named_by_cleanup(verdict: Verdict) -> list[str]:
    """The killed run's cleanup could not prove the order (its tag not listed yet): it named
    it "may be ours" with exit 3, cancelling nothing by a guess."""
    (run,) = verdict.outcome.runs
    named = "may be ours" in run.cleanup_output and "--cancel-unproven" in run.cleanup_output
    if run.cleanup_code == 3 and named:
        return []
    return [f"cleanup exit {run.cleanup_code}, the order not named: {run.cleanup_output[-300:]}"]


def _dirty_server_given_back(verdict: Verdict) -> list[str]:
    """The chain ran on two orders (one, had its server passed the handover), all passed, and
    the first job's order was given back (the reuse itself is the dirty_reuse invariant)."""
    fake = verdict.outcome.market.fake
    orders = sorted(fake.orders)
    problems = _all_pass(verdict)
    if len(orders) != 2:
        problems.append(f"{len(orders)} orders: the busy server was reused, or more rented")
    return problems + [f"order {o} still live" for o in orders if fake.orders[o].live]


def _all_pass(verdict: Verdict) -> list[str]:
    codes = verdict.exit_codes
    return [] if codes == [0] else [f"exit codes {codes}: a job failed for want of the host"]


# The issue's defects, one case each: (scenario, the invariants it must hold, an extra check,
# the finding while it fails today or None).
Check = Callable[[Verdict], list[str]]
EXAMPLES: dict[str, tuple[Callable[[], Scenario], tuple[str, ...], Check | None, str | None]] = {
    "two_job_leak": (
        examples.two_job_leak, ("leak", "idle_order"), _passed_on_one_order_each,
        None,  # was F2, fixed on main
    ),
    "chain_of_three": (
        examples.chain_of_three, ("leak",), _exactly_one_order,
        None,  # was F6, fixed on main
    ),
    "racing_cleanup": (
        examples.racing_cleanup, ("foreign_cancel", "leak"), None,
        None,  # was F3, fixed on main
    ),
    "signal_during_create": (
        examples.signal_during_create, ("leak",), _interrupted,
        None,  # was F4, fixed on main
    ),
    "cancels_failing_at_the_end": (
        examples.cancels_failing_at_the_end, ("signal", "leak"), _interrupted,
        None,  # was F5, fixed on main
    ),
    "cost_under_faults": (
        examples.cost_under_faults, ("cost_vs_bill", "leak"), None,
        None,  # was F1, fixed on main
    ),
    "rerent_while_released": (
        examples.rerent_while_released, ("leak",), _all_pass, None,
    ),
    "signal_at_start": (
        examples.signal_at_start, ("exit_code", "traceback"), _interrupted,
        None,  # was F7, fixed on main (nothing ran: no reports to write)
    ),
    "ahead_takes_the_last_slot": (
        examples.ahead_takes_the_last_slot, ("hung", "leak", "settled"), None,
        None,  # was F12, fixed on main
    ),
    "port_http_killed_before_its_id": (
        examples.port_http_killed_before_its_id, ("leak", "silent_leak"), _nothing_left, None,
    ),
    "untagged_until_deployed_killed_before_its_id": (
        examples.untagged_until_deployed_killed_before_its_id, ("leak", "silent_leak"),
        _nothing_left, None,
    ),
    "rate_limited_create_stamped_late": (
        examples.rate_limited_create_stamped_late, ("cost_vs_bill", "leak"), _all_pass, None,
    ),
    "untagged_stamped_late_killed": (
        examples.untagged_stamped_late_killed, ("leak", "silent_leak"), _named_by_cleanup, None,
    ),
    "dirty_handover": (
        examples.dirty_handover, ("dirty_reuse", "leak", "cost_vs_bill", "idle_order"),
        _dirty_server_given_back, None,
    ),
}  # fmt: skip


def _known(finding: str) -> pytest.MarkDecorator:
    """A strict xfail for a finding: only the check's own failure counts as the defect (an
    error in the harness, say, fails the test instead of passing for the defect)."""
    return pytest.mark.xfail(reason=finding, strict=True, raises=pytest.fail.Exception)


def _case_scenario(case: str) -> Scenario:
    kind, _, name = case.partition(":")
    if kind == "example":
        return EXAMPLES[name][0]()
    if kind == "big":
        return dataclasses.replace(draw(int(name)), run_bound_s=KNOWN_BOUND_S)
    return draw(int(name), small=True)


@pytest.fixture(scope="session")
def verdicts(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Verdict]:
    """Every chaos case this session selected, played at once, PARALLEL at a time."""
    params = (getattr(item, "callspec", None) for item in request.session.items)
    selected = {p.params["case"] for p in params if p and isinstance(p.params.get("case"), str)}
    cases = sorted(selected - {"quick-set"})
    folder = tmp_path_factory.mktemp("chaos")
    played = play_all([_case_scenario(c) for c in cases], folder, jobs=PARALLEL)
    by_seed = {v.scenario.seed: v for v in played}
    return {c: by_seed[_case_scenario(c).seed] for c in cases}


def _failing(violations: list[Violation], only: tuple[str, ...] | None = None) -> list[Violation]:
    if only is not None:
        return [v for v in violations if v.invariant in only]
    return [v for v in violations if v.invariant not in TOLERATED]


@pytest.mark.parametrize("case", [f"seed:{s}" for s in QUICK_SEEDS])
def test_a_drawn_scenario_holds_every_invariant(case: str, verdicts: dict[str, Verdict]) -> None:
    verdict = verdicts[case]
    if _failing(verdict.violations):
        pytest.fail(verdict.report(), pytrace=False)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=[_known(finding)] if finding else [])
        for case, (_, finding) in KNOWN_FAILING.items()
    ],
)
def test_a_seed_that_found_a_defect(case: str, verdicts: dict[str, Verdict]) -> None:
    verdict = verdicts[case]
    invariant = KNOWN_FAILING[case][0]
    if _failing(verdict.violations, (invariant,)):
        pytest.fail(verdict.report(), pytrace=False)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            f"example:{name}",
            marks=[_known(finding)] if finding else [],
        )
        for name, (_, _, _, finding) in EXAMPLES.items()
    ],
)
def test_an_issue_example(case: str, verdicts: dict[str, Verdict]) -> None:
    verdict = verdicts[case]
    _, held, extra, _ = EXAMPLES[case.partition(":")[2]]
    problems = [str(v) for v in _failing(verdict.violations, held)]
    problems += [
        str(v)
        for v in _failing(verdict.violations)
        if v.invariant in ("traceback", "exit_code", "hung")
    ]
    problems += extra(verdict) if extra is not None else []
    if problems:
        pytest.fail("\n".join(problems) + "\n" + verdict.report(), pytrace=False)


def test_a_seed_draws_the_same_scenario_every_time(tmp_path: Path) -> None:
    for seed in (1, 17, 123456):
        assert draw(seed) == draw(seed)
        assert draw(seed).pipeline(str(tmp_path)) == draw(seed).pipeline(str(tmp_path))
    assert draw(1) != draw(2)
    assert (draw(7).replay, draw(7, small=True).replay) == ("7", "7 --small")
    assert all(make().replay == f"--example {name}" for name, (make, *_) in EXAMPLES.items())
    sizes = {len(draw(s, small=True).jobs) for s in range(200)}
    assert sizes == {3, 4, 5}
    assert {len(draw(s).jobs) for s in range(300)} == set(range(3, 11))


def test_every_invariant_is_named() -> None:
    assert set(TOLERATED) <= set(INVARIANTS)
    assert {i for i, _ in KNOWN_FAILING.values()} <= set(INVARIANTS)
    assert {f"seed:{s}" for s in QUICK_SEEDS}.isdisjoint(KNOWN_FAILING)


@pytest.mark.parametrize("case", ["quick-set"])  # the fixture plays what the session selected
def test_the_quick_set_is_not_vacuous(case: str, verdicts: dict[str, Verdict]) -> None:
    """The invariants hold trivially for runs that rent nothing: the quick set must rent,
    run jobs, and end every way (a harness that broke the CLI would pass everything else)."""
    played = [v for c, v in verdicts.items() if c.startswith("seed:")]
    if len(played) < len(QUICK_SEEDS):
        pytest.skip("only part of the quick set was selected")
    orders = sum(len(v.outcome.market.fake.orders) for v in played)
    passed = sum(
        j["status"] == "passed"
        for v in played
        for run in v.outcome.runs
        for j in (run.summary or {}).get("jobs", [])
    )
    codes = {code for v in played for code in v.exit_codes}
    # A harness that broke the CLI rents nothing and passes nothing; a working one rents ~40
    # and passes 25-35 jobs (fewer since a run that cannot prove an accepted create's order
    # stops renting and exits 3, as seeds 105, 113 and 125 now do, and fewer on a loaded machine).
    assert orders >= 20 and passed >= 20, (orders, passed)
    assert {0, 1, 3, 130, -9} <= codes, codes
