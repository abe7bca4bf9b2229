"""`python -m tests.chaos.echo_figures`: issue 33's figures for the tag echo's shapes.

For each shape `my_orders` may echo the ownership tag in (as sent, integer, "PORT/http", absent
until deployed) and each case (a normal run; `kill -9` mid-boot, then the always-run
`clore-run cleanup`; `kill -9` before the order's id is known, then the cleanup), one scenario
is played by the real CLI against the fake Clore on real sshds (tests/chaos/harness.py), and a
table says: orders made, orders left billing, the run's and the cleanup's exit codes, the
silent leaks (an order left billing with exit 0: must be 0), and any invariant broken. Exits 1
when a silent leak or a violation is found.

`--shapes` picks other shapes (any of tests/fakes/clore_api.py's TAG_ECHOES), `--keep DIR`
keeps each scenario's folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.chaos.examples import echo_shape_case
from tests.chaos.invariants import last_word
from tests.chaos.market import SshdPool
from tests.chaos.scenario import Scenario
from tests.chaos.suite import Verdict, run_scenario
from tests.fakes.clore_api import TAG_ECHOES

SHAPES = ("as-sent", "integer", "port/http", "absent-until-deployed")
CASES = ("normal run", "kill -9 mid-boot + cleanup", "kill -9 before its id + cleanup")
KILL_AFTER_CREATE_S = 1.0  # the fake boots in 3 s: the kill lands while the order deploys
# The third case: my_orders lists the order 2 s late and the kill comes 0.5 s after the
# create, so the ledger has the create's marks but no order id: cleanup must prove it by tag.
LATE_LISTING_S, EARLY_KILL_S = 2.0, 0.5


def scenario(shape: str, case: str, index: int) -> Scenario:
    """One job on the cheapest of three hosts, its tag echoed in `shape`; killed as `case`."""
    early = case == CASES[2]
    kill = None if case == CASES[0] else EARLY_KILL_S if early else KILL_AFTER_CREATE_S
    return echo_shape_case(
        shape,
        kill_after_s=kill,
        listed_after_s=LATE_LISTING_S if early else None,
        seed=-1000 - index,
        replay=f"-m tests.chaos.echo_figures --shapes {shape}",
    )


def row(shape: str, case: str, verdict: Verdict) -> tuple[str, ...]:
    fake = verdict.outcome.market.fake
    (run,) = verdict.outcome.runs
    live = [o for o in fake.orders.values() if o.live]
    final_code, _ = last_word(run)
    silent = len(live) if final_code == 0 else 0
    broken = sorted({v.invariant for v in verdict.violations}) or ["-"]
    cleanup = "-" if not run.cleaned_up else str(run.cleanup_code)
    run_code = "killed" if run.code == -9 else str(run.code)
    return (
        shape, case, str(len(fake.orders)), str(len(live)), run_code, cleanup, str(silent),
        ",".join(broken),
    )  # fmt: skip


HEADER = (
    "echo shape", "case", "orders", "left billing", "run exit", "cleanup exit", "silent leaks",
    "violations",
)  # fmt: skip


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [HEADER, *rows]
    ]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.echo_figures")
    parser.add_argument("--shapes", nargs="+", choices=TAG_ECHOES, default=list(SHAPES))
    parser.add_argument("--keep", type=Path, help="keep the scenarios' folders here")
    args = parser.parse_args(argv)
    rows: list[tuple[str, ...]] = []
    bad = 0
    with tempfile.TemporaryDirectory(prefix="echo-figures-") as tmp:
        folder = args.keep or Path(tmp)
        sshds = SshdPool(Path(tmp) / "sshd")
        try:
            for i, (shape, case) in enumerate((s, c) for s in args.shapes for c in CASES):
                verdict = run_scenario(scenario(shape, case, i), sshds, folder)
                rows.append(row(shape, case, verdict))
                bad += rows[-1][6] != "0" or bool(verdict.violations)
                if verdict.violations:
                    print(verdict.report(), file=sys.stderr)
        finally:
            sshds.stop()
    print(table(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
